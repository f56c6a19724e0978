"""The models of a llama-server router or llama-swap: one chip per model with its status (loading with progress,
sleeping, failed), its own decode speed and context; the one followed is marked, and a click follows another.

Shown only when the Snapshot comes from such a server (``Snapshot.serving``); a text or chip is set again only when
what it shows changed.
"""

from __future__ import annotations

from PySide6 import QtCore, QtWidgets

from kvmon.core.serving import SERVING_LABELS, ServedModel, ServingView, status_word
from kvmon.core.snapshot import Snapshot
from kvmon.gui import fmt, theme
from kvmon.gui.flow import FlowBox
from kvmon.gui.text import set_text, text_label

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
            bits.append(f"{fmt.tokens(m.context_tokens).removesuffix(' tokens')}/"
                        f"{fmt.tokens(m.n_ctx).removesuffix(' tokens')}")  # the header's figures for the same model
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
    """A model's chip: its whole text always (the row flows onto another line when it is full); its width only
    grows while its text changes (a new speed does not move the chips after it)."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._whole = ""
        self._widest = 0
        self.setCheckable(True)
        self.setFlat(True)
        self.setFocusPolicy(QtCore.Qt.FocusPolicy.NoFocus)

    def set_whole_text(self, text: str) -> None:
        """The chip's text, shown as written (an ampersand in a model's name is not a keyboard shortcut)."""
        if text == self._whole:
            return
        self._whole = text
        self.setText(text.replace("&", "&&"))

    def whole_text(self) -> str:
        return self._whole

    def sizeHint(self) -> QtCore.QSize:
        hint = super().sizeHint()
        self._widest = max(self._widest, hint.width())
        return QtCore.QSize(self._widest, hint.height())

    def minimumSizeHint(self) -> QtCore.QSize:
        return self.sizeHint()


class ModelsPanel(FlowBox):
    """What the router or llama-swap serves: its kind and the model shown, then a chip per model, on as many rows
    as the width needs; emits ``follow_requested(name)`` (or ``None`` to follow the chat again)."""

    follow_requested = QtCore.Signal(object)

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent, h_gap=theme.GAP, v_gap=theme.UNIT)
        self.setObjectName("models")
        self.flow.setContentsMargins(theme.GAP, 0, theme.GAP, 0)
        self.kind = text_label(bold=True)
        self.showing = text_label()
        self.reason = text_label(colour="muted")
        title = QtWidgets.QWidget()  # one item of the flow, as high as a chip: its words on the chips' line
        row = QtWidgets.QHBoxLayout(title)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(theme.UNIT)
        for w in (self.kind, self.showing, self.reason):
            row.addWidget(w, 0, QtCore.Qt.AlignmentFlag.AlignVCenter)
        title.setMinimumHeight(Chip().sizeHint().height())
        self.flow.addWidget(title)
        self.chips: dict[str, Chip] = {}
        self.pinned: str | None = None  # the model the user chose (None: the one being chatted with)
        self.hide()

    @property
    def title(self) -> str:
        """The row's words before the chips: "llama-server router · showing qwen3-8b (used last)"."""
        return " ".join(w.text() for w in (self.kind, self.showing, self.reason) if w.text())

    def update_snapshot(self, s: Snapshot) -> None:
        v = s.serving
        if v is None:
            if self.isVisible():
                self.hide()
            return
        if self._render(v):
            self.updateGeometry()
        if not self.isVisible():
            self.show()

    def _render(self, v: ServingView) -> bool:
        """Set what changed of the title and the chips; whether any text or chip did."""
        changed = set_text(self.kind, SERVING_LABELS.get(v.kind, v.kind))
        changed |= set_text(self.showing, f"· showing {v.followed}" if v.followed else "")
        changed |= set_text(self.reason, f"({'chosen' if self.pinned else v.follow_reason or ''})" if v.followed
                            else "")
        names = [m.name for m in v.models]
        for name in [n for n in self.chips if n not in names]:
            gone = self.chips.pop(name)
            self.flow.removeWidget(gone)
            gone.deleteLater()
            changed = True
        for i, m in enumerate(v.models):
            chip = self.chips.get(m.name)
            if chip is None:
                chip = Chip(self)
                chip.clicked.connect(lambda _c=False, n=m.name: self._clicked(n))
                self.chips[m.name] = chip
                self.flow.insertWidget(1 + i, chip)
            text, tip = f"● {chip_text(m)}", chip_tip(m)
            if chip.whole_text() != text:
                chip.set_whole_text(text)
                changed = True
            if chip.toolTip() != tip:
                chip.setToolTip(tip)
            chip.setChecked(m.followed)
            if chip.font().bold() != m.followed:
                chip.setFont(theme.font("body", bold=m.followed))
                changed = True
            theme.tint(chip, STATUS_COLOURS.get(m.status, "muted"))
        return changed

    def _clicked(self, name: str) -> None:
        self.pinned = None if self.pinned == name else name  # the title says chosen / following at the next snapshot
        self.follow_requested.emit(self.pinned)
