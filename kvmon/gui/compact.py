"""The compact view: a small window to keep beside the chat (View ▸ Compact, Ctrl+M, ``kvmon --compact``, the tray).

It shows the verdict in its level's colour, the decode speed against the ceiling at this depth, five minutes of
decode speed under the ceiling, the context used of n_ctx, the VRAM headroom and the top alert on one line. With
several servers it follows the busiest (or the one chosen in its menu). A double-click returns to the full window;
its place, its size and whether it stays on top are remembered.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.core.history import History
from kvmon.core.severity import worst_alert
from kvmon.core.snapshot import Snapshot, VerdictLevel
from kvmon.gui import fmt, theme
from kvmon.gui.settings import Settings
from kvmon.gui.text import DotLabel, set_text, text_label

SPARK_WINDOW_S = 300.0  # the sparkline's five minutes
SPARK_MIN_SPAN_S = 5.0  # its shortest span: the first seconds of a session fill it, not a sliver of five minutes
DEFAULT_SIZE = QtCore.QSize(380, 150)
MINIMUM_SIZE = QtCore.QSize(340, 140)
BUSIEST = ""  # the follow choice that means "the busiest server"


@dataclass(frozen=True)
class CompactWords:
    """What the compact view says of one snapshot, in words (no Qt)."""

    level: str  # a theme severity name: the verdict's level
    state: str  # "Decoding", "Spilled", …
    sentence: str  # the verdict's sentence (its tooltip)
    speed: str  # "38.2 tok/s", or the last one measured while idle
    speed_dimmed: bool  # the speed is the last one measured, not now
    against: str  # "of 44.7 ceiling", "ceiling 44.3 here"
    context: str  # "context 33.5K of 131K"
    headroom: str  # "VRAM 215 MiB free"
    alert_level: str | None  # the top alert's level (a theme severity name), None without an alert
    alert: str  # the top alert in plain words, or "No alerts"


def headroom_text(s: Snapshot) -> str:
    """Room left where the model lives: under a Mac's GPU working-set limit (what the model and its caches hold,
    as its memory bar draws them, up to the limit's mark), else the GPU with the least VRAM free (a split model
    spills from that one first), or host RAM on a machine without a GPU."""
    for g in s.gpus:  # unified memory: the cliff is the GPU's working-set limit, not the end of RAM
        if g.kind == "unified_memory" and g.working_set_limit_bytes:
            held = sum(b or 0 for b in (g.weights_bytes, g.kv_allocated_bytes, g.draft_bytes, g.server_other_bytes))
            return f"{fmt.bytes_(max(0, g.working_set_limit_bytes - held))} under the GPU limit"
    free = [(g.vram_free_bytes, g) for g in s.gpus if g.vram_free_bytes is not None]
    if free:
        least, g = min(free, key=lambda x: x[0])
        return f"{'memory' if g.kind == 'unified_memory' else 'VRAM'} {fmt.bytes_(least)} free"
    if not s.gpus and s.host.ram_available_bytes is not None:
        return f"RAM {fmt.bytes_(s.host.ram_available_bytes)} free"
    return f"VRAM {fmt.DASH} free"


def headroom_tip(s: Snapshot) -> str:
    """Each device's free memory, one a line (the compact line shows the least)."""
    lines = [f"GPU {g.index} ({g.name or fmt.DASH}): {fmt.bytes_(g.vram_free_bytes)} free of "
             f"{fmt.bytes_(g.vram_total_bytes)}" for g in s.gpus]
    if s.host.ram_available_bytes is not None:
        lines.append(f"Host RAM: {fmt.bytes_(s.host.ram_available_bytes)} available")
    return "Memory left before the next allocation spills\n" + "\n".join(lines)


def compact_words(s: Snapshot) -> CompactWords:
    """The compact view's words for one snapshot."""
    v = s.verdict
    level = v.level.value if v is not None else VerdictLevel.OK.value
    state = (v.state if v is not None and v.state else s.connection.status.value.replace("_", " ").capitalize())
    ceil = fmt.num_tok_s(s.ceiling_tok_s) + ("?" if s.ceiling_suspect is not None else "")
    dimmed = s.decode_tok_s is None and s.last_decode is not None
    if s.decode_tok_s is not None:
        speed, against = fmt.tok_s(s.decode_tok_s), f"of {ceil} ceiling"
    elif s.last_decode is not None:
        age_s = s.t_monotonic - s.last_decode.t_monotonic
        when = "just now" if age_s < 1.0 else f"{fmt.duration(age_s)} ago"  # the header's words ("0.0 s ago" was not)
        speed, against = fmt.tok_s(s.last_decode.tok_s), f"{when} · ceiling {ceil} here"
    else:
        speed, against = fmt.DASH, f"ceiling {ceil} here"
    n_ctx = s.model.n_ctx
    used = fmt.tokens(s.context_tokens).removesuffix(" tokens")
    context = f"context {used} of {fmt.tokens(n_ctx).removesuffix(' tokens')}" if n_ctx else f"context {used}"
    top = worst_alert(s.alerts)
    return CompactWords(level, state, v.sentence if v is not None else "", speed, dimmed, against, context,
                        headroom_text(s), top.level.value if top is not None else None,
                        fmt.plain(top.message) if top is not None else "No alerts")


class Sparkline(QtWidgets.QWidget):
    """Five minutes of decode speed (solid; gaps stay gaps) under the ceiling (dashed), from the session's history."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMinimumSize(80, 40)
        self.setSizePolicy(QtWidgets.QSizePolicy.Policy.Expanding, QtWidgets.QSizePolicy.Policy.Expanding)
        self._t: Sequence[float] = ()
        self._decode: Sequence[float] = ()
        self._ceiling: Sequence[float] = ()
        self._top = 1.0
        self.setToolTip("Decode speed over the last five minutes (solid) under the ceiling (dashed)")

    def set_history(self, history: History) -> None:
        """Take the last five minutes of ``history`` and repaint."""
        view = history.view(SPARK_WINDOW_S)
        self._t = view.t.tolist()
        self._decode = view.series["decode_tok_s"].tolist()
        self._ceiling = view.series["ceiling_tok_s"].tolist()
        finite = [v for v in (*self._decode, *self._ceiling) if math.isfinite(v)]
        self._top = max(finite) * 1.1 if finite and max(finite) > 0 else 1.0
        self.update()

    def lines(self) -> dict[str, list[list[QtCore.QPointF]]]:
        """The decode and ceiling lines in the widget's coordinates, each cut where a value is unknown."""
        out: dict[str, list[list[QtCore.QPointF]]] = {"decode": [], "ceiling": []}
        if not self._t:
            return out
        r = QtCore.QRectF(self.rect()).adjusted(1, 2, -1, -2)
        end = self._t[-1]
        span = min(SPARK_WINDOW_S, max(SPARK_MIN_SPAN_S, end - self._t[0]))  # the data fills it from the start
        for name, values in (("ceiling", self._ceiling), ("decode", self._decode)):
            run: list[QtCore.QPointF] = []
            for t, v in zip(self._t, values, strict=True):
                if not math.isfinite(v):
                    if run:
                        out[name].append(run)
                    run = []
                    continue
                x = r.right() - (end - t) / span * r.width()
                run.append(QtCore.QPointF(x, r.bottom() - min(v, self._top) / self._top * r.height()))
            if run:
                out[name].append(run)
        return out

    def paintEvent(self, _e: QtGui.QPaintEvent) -> None:
        with QtGui.QPainter(self) as p:  # ended whatever happens: a painter left active outlives its widget
            p.fillRect(self.rect(), QtGui.QColor(theme.background()))
            for name, runs in self.lines().items():
                p.setPen(theme.pen(name, 1.5 if name == "decode" else 1.0))
                for run in runs:
                    if len(run) == 1:
                        p.drawPoint(run[0])
                    else:
                        p.drawPolyline(run)


class CompactView(QtWidgets.QWidget):
    """The small window; ``update_snapshot`` renders one server's snapshot and history, ``full_requested`` when the
    user asks for the full window (double-click, Ctrl+M, its menu)."""

    full_requested = QtCore.Signal()
    save_requested = QtCore.Signal()
    follow_changed = QtCore.Signal(str)  # a server's key, or BUSIEST

    def __init__(self, settings: Settings, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent, QtCore.Qt.WindowType.Window)
        self.setWindowTitle("kvmon")
        self.setObjectName("compact")
        self.settings = settings
        self.shown: Snapshot | None = None
        self.follow = BUSIEST
        self._servers: dict[str, str] = {}  # key -> label, when several are watched
        self._tints: dict[int, str] = {}  # the colour each label was given last
        self.server = text_label(colour="muted", name="server")
        self.verdict = DotLabel()
        self.verdict.words.setFont(theme.font("body", bold=True))
        self.speed = text_label(size="large", bold=True, colour="decode")
        self.against = text_label(colour="muted")
        self.context = text_label()
        self.headroom = text_label()
        self.spark = Sparkline()
        self.alert = DotLabel(elide=True)  # one line: a long alert ends in "…", whole on hover
        self._build()
        self._actions()
        self.set_on_top(settings.compact_on_top, remember=False)
        geo = settings.compact_geometry
        self.setMinimumSize(MINIMUM_SIZE)
        if geo is None or not self.restoreGeometry(geo):
            self.resize(DEFAULT_SIZE)

    def _build(self) -> None:
        """A line each: the verdict; the speed against the ceiling; the context and the headroom; then the sparkline
        across the whole width (its place depends on no text) and the top alert."""
        col = QtWidgets.QVBoxLayout(self)
        col.setContentsMargins(theme.GAP, theme.UNIT, theme.GAP, theme.UNIT)
        col.setSpacing(0)
        rows = ((self.verdict, None, self.server), (self.speed, self.against, None),
                (self.context, self.headroom, None))
        for first, second, right in rows:
            row = QtWidgets.QHBoxLayout()
            row.setSpacing(theme.GAP)
            row.addWidget(first, 0 if second is not None else 1, QtCore.Qt.AlignmentFlag.AlignBaseline)
            if second is not None:
                row.addWidget(second, 0, QtCore.Qt.AlignmentFlag.AlignBaseline)
                row.addStretch(1)
            if right is not None:
                row.addWidget(right)
            col.addLayout(row)
        col.addSpacing(theme.UNIT)
        col.addWidget(self.spark, 1)
        col.addSpacing(theme.UNIT)
        col.addWidget(self.alert)

    def _actions(self) -> None:
        """Its menu (right-click) and shortcuts: back to the full window, on top, which server, Save as PNG."""
        self.setContextMenuPolicy(QtCore.Qt.ContextMenuPolicy.CustomContextMenu)
        self.customContextMenuRequested.connect(lambda pos: self.menu().popup(self.mapToGlobal(pos)))
        self.full_action = self.addAction("Full window", QtGui.QKeySequence("Ctrl+M"), self.full_requested.emit)
        self.on_top_action = self.addAction("Always on top")
        self.on_top_action.setCheckable(True)
        self.on_top_action.triggered.connect(lambda on: self.set_on_top(on))
        self.save_action = self.addAction("Save as PNG…", QtGui.QKeySequence(QtGui.QKeySequence.StandardKey.Save),
                                          self.save_requested.emit)

    def menu(self) -> QtWidgets.QMenu:
        """The right-click menu (made when asked: the servers may have changed)."""
        menu = QtWidgets.QMenu(self)
        menu.addAction(self.full_action)
        menu.addAction(self.on_top_action)
        if len(self._servers) > 1:
            follow = menu.addMenu("Show")
            group = QtGui.QActionGroup(follow)
            for key, label in ((BUSIEST, "The busiest server"), *self._servers.items()):
                act = follow.addAction(label)
                act.setCheckable(True)
                act.setChecked(key == self.follow)
                act.triggered.connect(lambda _c=False, k=key: self.set_follow(k))
                group.addAction(act)
        menu.addSeparator()
        menu.addAction(self.save_action)
        return menu

    def set_servers(self, servers: Mapping[str, str]) -> None:
        """The watched servers (key -> label); the server's name shows only when there are several."""
        self._servers = dict(servers)
        if self.follow not in self._servers:
            self.follow = BUSIEST

    def set_follow(self, key: str) -> None:
        """Show one server (its key), or the busiest (``BUSIEST``)."""
        self.follow = key
        self.follow_changed.emit(key)

    def set_on_top(self, on: bool, *, remember: bool = True) -> None:
        """Stay above other windows (or not); remembered."""
        self.on_top_action.setChecked(on)
        if remember:
            self.settings.compact_on_top = on
        if bool(self.windowFlags() & QtCore.Qt.WindowType.WindowStaysOnTopHint) != on:
            visible = self.isVisible()
            self.setWindowFlag(QtCore.Qt.WindowType.WindowStaysOnTopHint, on)
            if visible:
                self.show()  # a window's flags change while it is hidden: shown again

    def update_snapshot(self, s: Snapshot, history: History, label: str = "") -> None:
        """Render one server's snapshot, and its last five minutes of history."""
        self.shown = s
        w = compact_words(s)
        self.verdict.set(f"● {w.state}", w.sentence or w.state, w.level)
        self._tint(self.verdict.words, w.level)
        set_text(self.server, label if len(self._servers) > 1 else "")
        set_text(self.speed, w.speed, "Decode speed now (generated tokens per second)" if not w.speed_dimmed
                 else "The last decode speed measured (nothing decodes now)")
        self._tint(self.speed, "muted" if w.speed_dimmed or s.decode_tok_s is None else "decode")
        set_text(self.against, w.against, "The ceiling: what the memory bus allows at this context depth")
        set_text(self.context, w.context,
                 "Context in use (the deepest conversation) of the context one conversation can hold")
        set_text(self.headroom, w.headroom, headroom_tip(s))
        self.alert.set(f"● {w.alert}", "", w.alert_level or "ok")
        self.spark.set_history(history)

    def _tint(self, label: QtWidgets.QWidget, colour: str) -> None:
        """A label's colour, set only when it changes (a new palette repaints the label)."""
        if self._tints.get(id(label)) != colour:
            self._tints[id(label)] = colour
            theme.tint(label, colour)

    def mouseDoubleClickEvent(self, e: QtGui.QMouseEvent) -> None:
        self.full_requested.emit()
        e.accept()

    def remember_place(self) -> None:
        self.settings.compact_geometry = self.saveGeometry()

    def hideEvent(self, e: QtGui.QHideEvent) -> None:
        self.remember_place()
        super().hideEvent(e)

    def closeEvent(self, e: QtGui.QCloseEvent) -> None:
        """The user closing the compact view goes back to the full window (Quit is in its File menu and the tray's);
        kvmon quitting closes it."""
        self.remember_place()
        if e.spontaneous():
            e.ignore()
            self.full_requested.emit()
        else:
            super().closeEvent(e)


if TYPE_CHECKING:
    _Window = QtWidgets.QMainWindow  # what it is mixed into
else:
    _Window = object


class CompactSwitch(_Window):
    """The window's part that switches to the compact view and back and feeds it the server it follows.

    Mixed into ``MainWindow`` (as ``WatchedServers`` is): it uses the window's settings, servers and signals.
    """

    settings: Settings
    compact: CompactView | None
    views: dict[str, Any]
    current: str
    shown_changed: Any
    framed: bool

    if TYPE_CHECKING:  # the window's own
        def raise_window(self) -> None: ...

    def compact_shown(self) -> bool:
        """The compact view is on screen (shown and not minimised)."""
        return self.compact is not None and self.compact.isVisible() and not self.compact.isMinimized()

    def toggle_compact(self) -> None:
        """Ctrl+M: the compact view in place of the full window, or back."""
        if self.compact_shown():
            self.show_full()
        else:
            self.show_compact()

    def show_compact(self) -> CompactView:
        """Switch to the compact view (the full window hides; polling keeps its pace)."""
        if self.compact is None:
            from kvmon.gui.compact import CompactView

            self.compact = CompactView(self.settings)
            if not self.framed:  # started compact: its first frame is the first on screen
                self.compact.installEventFilter(self)
            self.compact.full_requested.connect(self.show_full)
            self.compact.save_requested.connect(self.save_compact_png)
            self.compact.follow_changed.connect(lambda _k: self._update_compact())
        self.compact.show()
        self.compact.raise_()
        self._update_compact()
        self.hide()
        self.shown_changed.emit(True)
        return self.compact

    def show_full(self) -> None:
        """Back to the full window from the compact view."""
        self.raise_window()
        if self.compact is not None:
            self.compact.hide()

    def compact_key(self) -> str:
        """The server the compact view shows: the one chosen in its menu, else the busiest, else the shown one."""
        from kvmon.app.servers import busiest

        chosen = self.compact.follow if self.compact is not None else ""
        if chosen in self.views:
            return chosen
        return busiest({k: v.last for k, v in self.views.items()}) or self.current

    def _update_compact(self) -> None:
        if self.compact is None:
            return
        self.compact.set_servers({k: v.label or k for k, v in self.views.items()})
        view = self.views[self.compact_key()]
        if view.last is not None:
            self.compact.update_snapshot(view.last, view.store.history, view.label or view.key)

    def save_compact_png(self, path: str | None = None) -> str | None:
        """The compact view's own Save as PNG (with the caption strip under it)."""
        from kvmon.gui import caption, export

        if self.compact is None:
            return None
        shown = self.compact.shown
        path = path or export.ask_path(self.compact, "Save compact view",
                                       caption.default_filename(shown, "png", what="compact"), "PNG image (*.png)")
        if not path:
            return None
        try:
            export.save_png(self.compact, path, lambda: self.compact.shown if self.compact else None)
        except export.ExportError as exc:
            QtWidgets.QMessageBox.warning(self.compact, "Save compact view", str(exc))
            return None
        return path
