"""The dashboard window: renders Snapshots from the pollers into the panels; paints nothing while hidden.

Layout (docs/design.md): the server tabs (when several are watched); header; a router's models; the hero with the
replies' line under it (the what-if calculator on a second tab) beside speed over time, memory and bandwidth;
alerts and advice; the status bar. Each server keeps its own history, tally and recording (``ServerView``); the
panels show the selected one. The two plots (and the plotting library) are made just after the first frame is
painted, or when first asked for: the window is on screen in about the time a bare Qt window takes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.app.store import SessionStore
from kvmon.core.history import History
from kvmon.core.snapshot import Snapshot
from kvmon.core.summary import Tally
from kvmon.gui import theme
from kvmon.gui.compact import CompactSwitch, CompactView
from kvmon.gui.curve_actions import CurveActions
from kvmon.gui.flow import stack
from kvmon.gui.panels.alerts import AlertsPanel
from kvmon.gui.panels.bandwidth import BandwidthPanel
from kvmon.gui.panels.energy import EnergyPanel
from kvmon.gui.panels.header import HeaderPanel
from kvmon.gui.panels.latency import LatencyPanel
from kvmon.gui.panels.memory import MemoryPanel
from kvmon.gui.panels.models import ModelsPanel
from kvmon.gui.panels.status import JUST_NOW_S, StatusPanel
from kvmon.gui.server_tabs import ServerTabs, ServerView, WatchedServers
from kvmon.gui.settings import Settings, SettingsDialog
from kvmon.gui.tray import Tray
from kvmon.gui.window_actions import WindowActions

if TYPE_CHECKING:
    from kvmon.gui.panels.speed_context import SpeedContextPanel
    from kvmon.gui.panels.speed_time import SpeedTimePanel
    from kvmon.gui.whatif import WhatIfPanel

AGO_FIRST_TICK_MS = int(JUST_NOW_S * 1000) + 50  # just after "polled just now" would turn into a count
MAIN = "main"  # the key of a window's first server


class PlotSlot(QtWidgets.QWidget):
    """Where a plot panel goes: the plot's background until the plot is made (just after the first frame)."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAutoFillBackground(True)
        pal = self.palette()
        pal.setColor(QtGui.QPalette.ColorRole.Window, QtGui.QColor(theme.background()))
        self.setPalette(pal)
        self.setMinimumHeight(120)
        lay = QtWidgets.QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)

    def put(self, panel: QtWidgets.QWidget) -> None:
        self.layout().addWidget(panel)  # type: ignore[union-attr]


class MainWindow(WatchedServers, WindowActions, CurveActions, CompactSwitch, QtWidgets.QMainWindow):
    """Receives ``on_snapshot``; keeps history always, renders only when visible and not minimised."""

    pause_toggled = QtCore.Signal(bool)
    shown_changed = QtCore.Signal(bool)  # visible and not minimised: the poller may slow down when hidden
    reconnect_requested = QtCore.Signal()
    settings_changed = QtCore.Signal()
    record_requested = QtCore.Signal(object)  # a path to start recording to, or None to stop
    follow_requested = QtCore.Signal(str, object)  # (server key, model name or None): which model to show
    server_selected = QtCore.Signal(str)  # the server shown now
    add_server_requested = QtCore.Signal(str)  # a URL to watch too
    remove_server_requested = QtCore.Signal(str)  # a server key to stop watching
    first_painted = QtCore.Signal()  # the window's first frame is on screen (the app then opens its servers)

    def __init__(self, settings: Settings, *, banner: str | None = None, history: History | None = None,
                 tray: bool = True, on_close: Callable[[], None] | None = None, label: str = "",
                 key: str = MAIN) -> None:
        """``key``, ``label``: the first server's (more with ``add_server``)."""
        super().__init__()
        self.setWindowTitle("kvmon")
        self.settings = settings
        self.views: dict[str, ServerView] = {key: ServerView(key, label, SessionStore(history), banner=banner)}
        self.current = self._first = key
        self._use_view(self.views[key])
        self.shown: Snapshot | None = None  # the snapshot the panels show (exports caption with its numbers)
        self.paused = False
        self.render_count = 0
        self._dirty = False
        self._on_close = on_close
        self.compact: CompactView | None = None  # the small window beside the chat (View ▸ Compact), made when asked

        self._banner = banner
        self._recording: str | None = None
        self._replay_status: str | None = None
        self.starting = False  # shown before its servers are known (see show_starting)
        self.framed = False  # the first frame is on screen (or none will be: minimised first)
        self.installEventFilter(self)  # until the first frame is painted (then the plots are made)
        self.window_range = settings.window_range
        app = QtWidgets.QApplication.instance()
        if settings.scheme != "system" and app is not None and theme.is_dark() != (settings.scheme == "dark"):
            theme.apply(app, settings.scheme == "dark")  # type: ignore[arg-type]  # before the panels are made
        self._build_panels()

        self._show_connecting()
        self.tray = Tray(self) if tray else None
        if self.tray is not None:
            self.tray.activated.connect(self.raise_window)
        self._make_menus()
        self.set_window_range(settings.window_range)
        self.setMinimumSize(theme.fit_screen(self, theme.WINDOW_MINIMUM))
        geo = settings.geometry
        if geo is None or not self.restoreGeometry(geo):
            self.resize(theme.fit_screen(self, theme.WINDOW_SIZE))
        # "polled N s ago" needs a tick only once a poll is late: each snapshot sets the timer to fire just after the
        # text would change, then it ticks each second until the next snapshot (no wake-up while polls are on time)
        self._ago = QtCore.QTimer(self)
        self._ago.setTimerType(QtCore.Qt.TimerType.CoarseTimer)
        self._ago.timeout.connect(self._tick)
        self._ago.start(AGO_FIRST_TICK_MS)
        app = QtWidgets.QApplication.instance()
        if app is not None:
            app.styleHints().colorSchemeChanged.connect(self._scheme_changed)  # type: ignore[attr-defined]

    @QtCore.Slot(QtCore.Qt.ColorScheme)
    def _scheme_changed(self, scheme: QtCore.Qt.ColorScheme) -> None:
        if scheme != QtCore.Qt.ColorScheme.Unknown and self.settings.scheme == "system":
            self.apply_scheme(scheme == QtCore.Qt.ColorScheme.Dark)

    def _use_view(self, v: ServerView) -> None:
        """Point the window's state at one server's (the panels are built on it)."""
        self.store = v.store
        self.history = v.store.history
        self.points = v.store.points  # the hero plot's bins, the report card's points
        self.bins = self.points.bins
        self.last = v.last

    @property
    def tally(self) -> Tally:
        """The shown server's report-card tally (its store's: replaced when the session is forgotten)."""
        return self.store.tally

    def set_banner(self, text: str | None, key: str | None = None) -> None:
        """The line above the header (demo notice, replay) of a server (the shown one by default)."""
        view = self.views[key or self.current]
        view.banner = text
        if view.key == self.current:
            self._banner = text
            self.header.set_banner(text)

    def set_recording(self, path: str | None, key: str | None = None) -> None:
        """Show a server's recording state (the shown one by default); kept across a theme rebuild."""
        view = self.views[key or self.current]
        view.recording = path
        if view.key != self.current:
            return
        self._recording = path
        self.status.set_recording(path)
        act = getattr(self, "record_action", None)
        if act is not None:
            act.setChecked(bool(path))

    def set_replay_status(self, text: str | None) -> None:
        """A replay's position in the status bar, in place of the connection; kept across a theme rebuild."""
        self._replay_status = text
        self.status.set_replay(text)

    def _build_panels(self) -> None:
        """Create the panels and layout (again after a dark/light switch or another server: plot pens and the
        history they draw are fixed at creation)."""
        self.server_tabs = ServerTabs(self.views, self.current)
        self.server_tabs.selected.connect(self.select_server)
        self.server_tabs.close_requested.connect(self.remove_server_requested.emit)
        self.header = HeaderPanel()
        self.header.set_banner(self._banner)
        self.shown = None  # new panels show nothing yet
        self.models = ModelsPanel()
        self.models.pinned = self.views[self.current].pinned
        self.models.follow_requested.connect(self._follow)
        self._speed_context: SpeedContextPanel | None = None  # made by _build_plots
        self._speed_time: SpeedTimePanel | None = None
        self._hero_slot, self._time_slot = PlotSlot(), PlotSlot()
        self.whatif: WhatIfPanel | None = None  # built on first use: it costs start-up time
        self.memory = MemoryPanel()
        self.bandwidth = BandwidthPanel()
        self.energy = EnergyPanel()
        self.latency = LatencyPanel()
        self.alerts = AlertsPanel()
        self.status = StatusPanel()
        self.switchable = {"speed_time": self._time_slot, "memory": self.memory, "bandwidth": self.bandwidth,
                           "latency": self.latency, "energy": self.energy, "alerts": self.alerts}
        self.setStatusBar(self.status)
        self.status.set_recording(self._recording)
        if self._replay_status is not None:
            self.status.set_replay(self._replay_status)

        # the grid: on the left, the hero with the replies' line under it (the what-if calculator on a second tab
        # has the column to itself); on the right, speed over time, memory and bandwidth. Each panel's height comes
        # from the window's size and the panels' fixed parts, never a poll's text.
        self._replies_box = stack(QtWidgets.QGroupBox("Replies and energy"), self.latency, self.energy,
                                  sides=theme.GAP, ends=theme.UNIT)
        hero_page = stack(QtWidgets.QWidget(), self._hero_slot, self._replies_box, grow=self._hero_slot)
        self.tabs = QtWidgets.QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(hero_page, "Speed vs context")
        self.tabs.addTab(QtWidgets.QWidget(), "What if…")
        self.tabs.currentChanged.connect(self._tab_changed)
        self._right = stack(QtWidgets.QWidget(), self._time_slot, self.memory, self.bandwidth, grow=self._time_slot)
        split = QtWidgets.QSplitter(QtCore.Qt.Orientation.Horizontal)
        split.setChildrenCollapsible(False)
        split.setHandleWidth(theme.GAP)
        split.addWidget(self.tabs)
        split.addWidget(self._right)
        split.setStretchFactor(0, 11)
        split.setStretchFactor(1, 10)
        split.setSizes([11000, 10000])  # 11:10 from the first frame: the plots arrive after it, with no say in it
        self.setCentralWidget(stack(QtWidgets.QWidget(), self.server_tabs, self.header, self.models, split,
                                    self.alerts, grow=split, sides=theme.GAP, ends=theme.UNIT))
        if hasattr(self, "menus"):  # a rebuild: the panels switched off stay off, the plots are made now
            self._apply_panels()
            self._build_plots()

    def _build_plots(self) -> None:
        """Make the two plot panels (loading the plotting library the first time) and put them in their slots."""
        if self._speed_context is not None:
            return
        from kvmon.gui.panels.speed_context import SpeedContextPanel
        from kvmon.gui.panels.speed_time import SpeedTimePanel

        self._speed_context = SpeedContextPanel(self.bins, self.points.earlier_bins, step=lambda: self.points.step)
        self._hero_slot.put(self._speed_context)
        self._speed_time = SpeedTimePanel(self.history)
        self._time_slot.put(self._speed_time)
        self.set_window_range(self.window_range)
        if self.shown is not None and self.painting():
            self.render_panels()  # what the panels already show, now the plots too

    @property
    def speed_context(self) -> SpeedContextPanel:
        """The speed-vs-context plot panel (made on first use)."""
        self._build_plots()
        assert self._speed_context is not None
        return self._speed_context

    @property
    def speed_time(self) -> SpeedTimePanel:
        """The speed-over-time plot panel (made on first use)."""
        self._build_plots()
        assert self._speed_time is not None
        return self._speed_time

    def eventFilter(self, obj: QtCore.QObject, e: QtCore.QEvent) -> bool:
        """The first frame on screen, the window's or (started compact) the compact view's: make the plots right
        after it and say so (then this filter goes)."""
        if e.type() == QtCore.QEvent.Type.Paint and (obj is self or obj is self.compact):
            self._first_frame()
        return False

    def _first_frame(self) -> None:
        """Say once that the first frame is on screen, or that none will be (the window was minimised first)."""
        if self.framed:
            return
        self.framed = True
        self.removeEventFilter(self)
        if self.compact is not None:
            self.compact.removeEventFilter(self)
        QtCore.QTimer.singleShot(0, self._build_plots)
        QtCore.QTimer.singleShot(0, self.first_painted.emit)

    def rebuild_panels(self) -> None:
        """The panels made again (another scheme or server) and showing the last snapshot, or that none came yet."""
        old = self.centralWidget()
        self._build_panels()
        if old is not None:
            old.deleteLater()
        if self.last is not None:
            self.render_panels()
        else:
            self._show_connecting()

    def apply_scheme(self, dark: bool) -> None:
        """Follow a system dark/light switch: re-theme and rebuild the panels; history and points are kept."""
        app = QtWidgets.QApplication.instance()
        if app is None or dark == theme.is_dark():
            return
        theme.apply(app, dark)  # type: ignore[arg-type]
        self.rebuild_panels()
        if self.compact is not None:  # its colours too: made again in the new scheme, where it was
            was_shown = self.compact_shown()
            self.compact.remember_place()
            self.compact.deleteLater()
            self.compact = None
            if was_shown:
                self.show_compact()

    # --- actions ---------------------------------------------------------------------------------
    def _make_menus(self) -> None:
        """File menu and toolbar: exports (PNG/SVG/CSV/clipboard), recording, report card, recording → CSV."""
        from kvmon.gui import export, menus

        self.report_snapshots: Callable[[], Sequence[Snapshot]] | None = None  # set by replay
        menu = self.menuBar().addMenu("&File")
        bar = QtWidgets.QToolBar("Export", self)
        bar.setObjectName("export")
        bar.setMovable(False)
        bar.setToolButtonStyle(QtCore.Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.exports = export.install_actions(self, menu, bar)
        menu.addSeparator()
        self.record_action = self.exports.add("record", "Record session…", self.toggle_recording, menu, "Ctrl+R")
        self.record_action.setCheckable(True)
        self.exports.add("report", "Save report card…", self.save_report_card, menu,
                                              "Ctrl+Shift+R")
        self.csv_action = self.exports.add("recording_csv", "Export recording as CSV…", self.save_recording_csv,
                                           menu)
        self.csv_action.setEnabled(False)
        menu.addSeparator()
        self.exports.add("add_server", "Add server…", self.ask_add_server, menu, "Ctrl+N")
        for key in ("record", "report"):
            bar.addAction(self.exports.actions[key])
        bar.setIconSize(QtCore.QSize(0, 0))
        self.menuBar().setCornerWidget(bar, QtCore.Qt.Corner.TopRightCorner)  # beside the menus: no row of its own
        self.toolbar = bar
        self.menus = menus.install(self, menu)  # View, Tools, Help, Quit and the tray's menu
        self._apply_panels()

    def open_settings(self) -> SettingsDialog:
        """Ctrl+,: the connection dialog (non-modal, so polling and painting go on)."""
        dlg = SettingsDialog(self.settings, self.last.backend if self.last else None, self, snapshot=self.last)
        def apply_settings() -> None:
            dlg.apply()
            self.settings_changed.emit()

        dlg.accepted.connect(apply_settings)
        dlg.open()
        return dlg

    def raise_window(self) -> None:
        """Show the window (from minimised, or behind others) and bring it to the front."""
        self.showNormal()
        self.raise_()
        self.activateWindow()

    def show_starting(self) -> None:
        """Before the servers are known (the window is shown first at start-up): say that they are being opened
        (until ``name_first_server``, also after a theme switch rebuilds the panels)."""
        self.starting = True
        why = "Finding and opening the servers to watch"
        self.alerts.show_text("● Starting…", why)
        if self.status.replaying is None:
            self.status.connection.set("● starting", why)

    def _show_connecting(self) -> None:
        """Before the first snapshot: say that the first poll is under way (or, at start-up, the servers' opening)."""
        if self.starting:
            self.show_starting()
            return
        self.alerts.show_text("● Connecting…", "The first poll of the server is under way")
        if self.status.replaying is None:
            self.status.connection.set("● connecting", "Waiting for the first snapshot")

    # --- rendering -------------------------------------------------------------------------------
    def painting(self) -> bool:
        """True when the window can be seen (shown and not minimised)."""
        return self.isVisible() and not self.isMinimized()

    @QtCore.Slot(object)
    def on_snapshot(self, s: Snapshot) -> None:
        """A snapshot of the window's first server (a single-server window, a replay)."""
        self.on_server_snapshot(self._first, s)

    def on_server_snapshot(self, key: str, s: Snapshot) -> None:
        """Store every snapshot of every server; render the shown one only when visible (else mark it dirty)."""
        view = self.views.get(key)
        if view is None:
            return  # a server just removed: its poller's last snapshot
        shown = key == self.current
        if view.store.eat(s) and shown:  # another model: its measured points start again
            self.speed_context.reset()
        self.server_tabs.paint(view)
        if self.tray is not None:
            self._update_tray(key, s)
        if self.compact_shown():
            self._update_compact()
        if not shown:
            return
        self.last = s
        self._ago.start(AGO_FIRST_TICK_MS)
        if self.painting():
            self.render_panels()
        else:
            self._dirty = True

    def reset(self) -> None:
        """Forget the shown server's session (another URL, or a replay): history, measured points, last snapshot."""
        self.store.clear()
        self.speed_context.reset()
        self.last = self.shown = None
        self._dirty = False
        self._show_connecting()

    def load(self, snapshots: Iterable[Snapshot]) -> None:
        """Take a whole recording at once: history and points first, one render at the end. A stream is eaten one
        Snapshot at a time (the store keeps columns; no Snapshot but the last is held)."""
        last: list[Snapshot] = []

        def each() -> Iterator[Snapshot]:
            for s in snapshots:
                last[:] = (s,)
                yield s

        if self.store.load(each()):  # another model on the way: its points started again
            self.speed_context.reset()
        if last:
            self.last = last[0]
            self._dirty = True
            if self.painting():
                self.render_panels()

    def render_panels(self) -> None:
        """Push the last snapshot into every panel (each compares before it touches Qt)."""
        s = self.last
        if s is None:
            return
        self._dirty = False
        self.render_count += 1
        self.shown = s
        self.header.update_snapshot(s)
        self.models.update_snapshot(s)
        self.speed_context.update_snapshot(s)
        self.speed_time.refresh(s)
        self.memory.update_snapshot(s)
        self.bandwidth.update_snapshot(s)
        self.latency.update_snapshot(s)
        self.energy.update_snapshot(s)
        self.alerts.update_snapshot(s)
        self.status.update_snapshot(s)
        if self.whatif is not None and self.tabs.currentWidget() is self.whatif:
            self.whatif.set_live(s)

    def show_whatif(self) -> WhatIfPanel:
        """Switch to the what-if calculator, building it the first time."""
        if self.whatif is None:
            from kvmon.gui.whatif import WhatIfPanel

            self.whatif = WhatIfPanel()
            with QtCore.QSignalBlocker(self.tabs):
                self.tabs.removeTab(1)
                self.tabs.insertTab(1, self.whatif, "What if…")
        self.tabs.setCurrentWidget(self.whatif)
        if self.last is not None:
            self.whatif.set_live(self.last)
        return self.whatif

    def _tab_changed(self, index: int) -> None:
        if index == 1 and self.whatif is None:
            self.show_whatif()

    def _tick(self) -> None:
        self._ago.setInterval(1000)
        if self.painting():
            self.status.tick()

    def seen(self) -> bool:
        """The window or its compact view can be seen: the pollers keep their pace."""
        return self.painting() or self.compact_shown()

    def showEvent(self, e: QtGui.QShowEvent) -> None:
        super().showEvent(e)
        self.shown_changed.emit(True)
        if self._dirty:
            self.render_panels()

    def hideEvent(self, e: QtGui.QHideEvent) -> None:
        super().hideEvent(e)
        self.shown_changed.emit(self.seen())

    def changeEvent(self, e: QtCore.QEvent) -> None:
        super().changeEvent(e)
        if e.type() == QtCore.QEvent.Type.WindowStateChange:
            if self.isMinimized() and not self.framed:  # no frame will come: the servers are opened all the same
                self._first_frame()
            self.shown_changed.emit(self.seen())
            if self._dirty and self.painting():
                self.render_panels()

    def closeEvent(self, e: QtGui.QCloseEvent) -> None:
        if self.compact is not None:
            self.compact.remember_place()
            self.compact.deleteLater()
            self.compact = None
        self.settings.geometry = self.saveGeometry()
        self.settings.sync()
        self._ago.stop()
        if self._on_close is not None:
            self._on_close()
        super().closeEvent(e)
