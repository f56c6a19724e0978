"""The models of a llama-server router or llama-swap: one chip per model with its status (loading with progress,
sleeping, failed), its own decode speed and context; the one followed is marked, and a click follows another.

Shown only when the Snapshot comes from such a server (``Snapshot.serving``); rebuilt only when what it shows
changed.
"""

from __future__ import annotations

import html

from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.core.serving import SERVING_LABELS, ServedModel, ServingView, status_word
from kvmon.core.snapshot import Snapshot
from kvmon.gui import fmt, theme
from kvmon.gui.labels import ValueLabel

CHIP_MIN_WIDTH = 48  # px: a chip may be squeezed this far in a narrow window (its tooltip says it all)
STATUS_COLOURS = {"loaded": "ok", "loading": "info", "sleeping": "muted", "unloading": "muted", "unloaded": "muted",
                  "downloading": "info", "failed": "critical"}


def chip_text(m: ServedModel) -> str:
    """One model in a few words: its name, then its speed and context when it runs, else its status."""
    bits = [m.name]
    if m.status == "loaded":
        if m.decode_tok_s is not None:
            bits.append(fmt.tok_s(m.decode_tok_s))
        elif m.processing is False:
            bits.append("idle")
        if m.context_tokens is not None and m.n_ctx:
            bits.append(f"{fmt.tokens(m.context_tokens).removesuffix(' tokens')}/{fmt.ctx_label(m.n_ctx)}")
    else:
        bits.append(status_word(m))
    return " · ".join(bits)


def chip_tip(m: ServedModel) -> str:
    lines = [f"{m.name}: {status_word(m)}" + (" — shown now" if m.followed else "")]
    if m.n_ctx:
        lines.append(f"Context {fmt.tokens(m.context_tokens)} in use of {fmt.tokens(m.n_ctx)} per slot"
                     + (f", {m.n_slots} slots" if m.n_slots and m.n_slots > 1 else ""))
    if m.kv_allocated_bytes is not None:
        lines.append(f"KV cache {fmt.bytes_(m.kv_in_use_bytes)} in use of {fmt.bytes_(m.kv_allocated_bytes)}")
    if m.weight_bytes is not None:
        lines.append(f"Weights {fmt.bytes_(m.weight_bytes)}")
    if m.alerts:
        lines.append(f"{m.alerts} warning(s) on this model")
    if m.note:
        lines.append(m.note)
    lines.append("Click to show this model; click the shown one again to follow the one being chatted with")
    return "\n".join(lines)


class Chip(QtWidgets.QPushButton):
    """A model's chip: squeezed in a narrow window, its text ends in "…" (the tooltip says it all)."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._whole = ""

    def set_whole_text(self, text: str) -> None:
        """The chip's text; shown shortened when the chip is narrower than it."""
        self._whole = text
        self._fit()
        self.updateGeometry()

    def whole_text(self) -> str:
        return self._whole

    def sizeHint(self) -> QtCore.QSize:
        hint = super().sizeHint()  # of the text shown: the whole one's instead
        fm = self.fontMetrics()
        return QtCore.QSize(hint.width() - fm.horizontalAdvance(self.text()) + fm.horizontalAdvance(self._whole),
                            hint.height())

    def resizeEvent(self, e: QtGui.QResizeEvent) -> None:
        super().resizeEvent(e)
        self._fit()

    def showEvent(self, e: QtGui.QShowEvent) -> None:
        super().showEvent(e)
        self._fit()

    def _fit(self) -> None:
        if not self.isVisible():  # not laid out yet: its width says nothing
            shown = self._whole
        else:
            fm = self.fontMetrics()
            frame = super().sizeHint().width() - fm.horizontalAdvance(self.text())  # padding, border, margins
            shown = fm.elidedText(self._whole, QtCore.Qt.TextElideMode.ElideRight, max(self.width() - frame, 0))
        if shown != self.text():
            self.setText(shown)


class ModelsPanel(QtWidgets.QFrame):
    """A row of model chips; emits ``follow_requested(name)`` (or ``None`` to follow the chat again)."""

    follow_requested = QtCore.Signal(object)

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("models")
        self._row = QtWidgets.QHBoxLayout(self)
        self._row.setContentsMargins(8, 0, 8, 0)
        self._row.setSpacing(6)
        self.title = ValueLabel()
        # a narrow window squeezes the title rather than the window: it ends in "…", said whole on hover
        self.title.set_elide(True)
        self.title.setSizePolicy(QtWidgets.QSizePolicy.Policy.Preferred, QtWidgets.QSizePolicy.Policy.Preferred)
        self._row.addWidget(self.title)  # its room first; the stretch after the chips takes the rest
        self.chips: dict[str, Chip] = {}
        self._row.addStretch(1)
        self._key: object = None
        self.pinned: str | None = None  # the model the user chose (None: the one being chatted with)
        self.hide()

    def update_snapshot(self, s: Snapshot) -> None:
        v = s.serving
        if v is None:
            if self.isVisible():
                self.hide()
            self._key = None
            return
        key = (v.kind, v.followed, v.follow_reason, v.models, self.pinned)
        if key == self._key:
            return
        self._key = key
        self._render(v)
        if not self.isVisible():
            self.show()

    def _render(self, v: ServingView) -> None:
        label = SERVING_LABELS.get(v.kind, v.kind)
        muted = theme.hex_color("muted")
        how = (f" · showing <b>{html.escape(v.followed)}</b> <span style='color:{muted}'>"
               f"({'chosen' if self.pinned else html.escape(v.follow_reason or '')})</span>" if v.followed else "")
        self.title.set(f"<b>{html.escape(label)}</b>{how}")
        names = [m.name for m in v.models]
        for name in [n for n in self.chips if n not in names]:
            gone = self.chips.pop(name)
            self._row.removeWidget(gone)
            gone.deleteLater()
        for i, m in enumerate(v.models):
            chip = self.chips.get(m.name)
            if chip is None:
                chip = Chip(self)
                chip.setCheckable(True)
                chip.setFlat(True)
                chip.setFocusPolicy(QtCore.Qt.FocusPolicy.NoFocus)
                chip.setMinimumWidth(CHIP_MIN_WIDTH)
                chip.clicked.connect(lambda _c=False, n=m.name: self._clicked(n))
                self.chips[m.name] = chip
                self._row.insertWidget(1 + i, chip)
            colour = theme.hex_color(STATUS_COLOURS.get(m.status, "muted"))
            chip.set_whole_text(f"● {chip_text(m)}")
            chip.setToolTip(chip_tip(m))
            chip.setChecked(m.followed)
            weight = "bold" if m.followed else "normal"
            chip.setStyleSheet(f"QPushButton {{ color: {colour}; font-weight: {weight}; padding: 1px 6px; "
                               f"border: 1px solid {colour if m.followed else 'transparent'}; border-radius: 4px; }}")

    def _clicked(self, name: str) -> None:
        self.pinned = None if self.pinned == name else name
        self._key = None  # the title says chosen / following at the next snapshot
        self.follow_requested.emit(self.pinned)
