"""The servers one window watches: what it keeps of each (``ServerView``) and a tab bar with one coloured tab per
server (shown when there are two or more): its name and speed, red when it is not read, amber with a warning."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.app.store import SessionStore
from kvmon.core.severity import worst_level
from kvmon.core.snapshot import AlertLevel, Snapshot
from kvmon.gui import theme
from kvmon.gui.settings import WINDOW_RANGES

if TYPE_CHECKING:
    from kvmon.gui.panels.speed_time import SpeedTimePanel

    _Window = QtWidgets.QMainWindow  # what WatchedServers is mixed into
else:
    _Window = object

@dataclass
class ServerView:
    """One watched server as the window shows it: its session store, its tab's label and banner, its recording and
    the model the user chose to see."""

    key: str
    label: str
    store: SessionStore = field(default_factory=SessionStore)
    recording: str | None = None
    banner: str | None = None
    pinned: str | None = None  # the model of a router / llama-swap the user chose to see

    @property
    def last(self) -> Snapshot | None:
        """The store's newest Snapshot."""
        return self.store.last


def shown(text: str) -> str:
    """A tab's text as written: an ampersand in a server's or model's name is not a keyboard shortcut."""
    return text.replace("&", "&&")


def tab_colour(s: Snapshot | None) -> str:
    """The theme colour of a server's tab: muted before a poll and while only information stands (loading,
    connecting, paused); else by the worst of its connection state and its alerts, as the alerts panel ranks them."""
    if s is None:
        return "muted"
    level = worst_level(s)
    if level is AlertLevel.CRITICAL or level is AlertLevel.WARNING:
        return level.value
    return "ok" if s.server_read else "muted"


class ServerTabs(QtWidgets.QTabBar):
    """One tab per server, keyed by the server's key; ``selected(key)`` when the user picks one."""

    selected = QtCore.Signal(str)
    close_requested = QtCore.Signal(str)

    def __init__(self, views: Mapping[str, ServerView], current: str,
                 parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._views = views  # the window's own (live) mapping: the tabs are painted again when the bar shows
        self._painted: dict[str, tuple[str, str, str]] = {}  # key -> (colour, text, tooltip) last set on its tab
        self._shown = False  # two servers or more: the bar shows
        self.setDocumentMode(True)
        self.setExpanding(False)
        for v in views.values():
            self.add(v)
        self.setCurrentIndex(list(views).index(current))
        self.currentChanged.connect(self._picked)
        self.tabCloseRequested.connect(lambda i: self.close_requested.emit(self.tabData(i)))
        self._fit()

    def _index(self, key: str) -> int:
        return next((i for i in range(self.count()) if self.tabData(i) == key), -1)

    def _fit(self) -> None:
        shown = self.count() > 1
        if shown and not self._shown:  # the tabs kept their labels while hidden: say each server as it is now
            self._painted.clear()
            for v in self._views.values():
                self._paint(v)
        self._shown = shown
        self.setTabsClosable(shown)
        self.setVisible(shown)

    def add(self, v: ServerView) -> None:
        i = self.addTab(shown(v.label or v.key))
        self.setTabData(i, v.key)
        self._painted.pop(v.key, None)
        self.paint(v)
        self._fit()

    def rename(self, old: str, v: ServerView) -> None:
        """The tab of ``old`` is now ``v``'s (its key and label)."""
        self._painted.pop(old, None)
        i = self._index(old)
        if i >= 0:
            self.setTabData(i, v.key)
            self.setTabText(i, shown(v.label or v.key))
        self.paint(v)

    def remove(self, key: str) -> None:
        self._painted.pop(key, None)
        i = self._index(key)
        if i >= 0:
            with QtCore.QSignalBlocker(self):
                self.removeTab(i)
        self._fit()

    def paint(self, v: ServerView) -> None:
        """The server's tab after a snapshot: its colour, its speed, its state on hover; nothing while the bar is
        hidden (one server: the speed moves every poll, and each new tab text lays the bar out again)."""
        if self.count() > 1:
            self._paint(v)

    def _paint(self, v: ServerView) -> None:
        i = self._index(v.key)
        if i < 0:
            return
        s = v.last
        colour = theme.hex_color(tab_colour(s))
        speed = f" · {s.decode_tok_s:.0f} tok/s" if s is not None and s.decode_tok_s else ""
        text = f"{v.label or v.key}{speed}"
        state = (s.connection.reason or s.connection.status.value) if s is not None else "not polled yet"
        tip = f"{v.key}\n{state}"
        if self._painted.get(v.key) == (colour, text, tip):
            return  # nothing on the tab changed: no relayout of the bar
        self._painted[v.key] = (colour, text, tip)
        self.setTabTextColor(i, QtGui.QColor(colour))
        self.setTabText(i, shown(text))
        self.setTabToolTip(i, tip)

    def _picked(self, index: int) -> None:
        key = self.tabData(index)
        if isinstance(key, str):
            QtCore.QTimer.singleShot(0, lambda: self.selected.emit(key))  # not inside the tab bar's own signal


class WatchedServers(_Window):
    """The window's part that manages its servers: add, remove, show one, choose a router's model, the tray.

    Mixed into ``MainWindow``: it uses the window's views, panels, signals and rendering, which the window defines.
    """

    views: dict[str, ServerView]
    current: str
    _first: str
    starting: bool
    server_tabs: ServerTabs
    tray: Any
    last: Snapshot | None
    window_range: str
    server_selected: QtCore.Signal
    follow_requested: QtCore.Signal
    add_server_requested: QtCore.Signal

    if TYPE_CHECKING:  # the window's own
        def set_banner(self, text: str | None, key: str | None = None) -> None: ...
        def set_recording(self, path: str | None, key: str | None = None) -> None: ...
        def _show_connecting(self) -> None: ...
        def _use_view(self, v: ServerView) -> None: ...
        def rebuild_panels(self) -> None: ...
        @property
        def speed_time(self) -> SpeedTimePanel: ...

    def add_server(self, key: str, label: str, banner: str | None = None) -> ServerView:
        """Watch one more server: its own history, tally and recording; a tab appears (two or more)."""
        if key in self.views:
            return self.views[key]
        view = self.views[key] = ServerView(key, label, banner=banner)
        self.server_tabs.add(view)
        return view

    def name_first_server(self, key: str, label: str, banner: str | None = None) -> None:
        """The window's first server, named once it is known (the window is shown before it at start-up): its view
        takes ``key`` and ``label`` and keeps what it holds."""
        old = self._first
        view = self.views.pop(old)
        view.key, view.label = key, label
        rest = dict(self.views)
        self.views.clear()
        self.views[key] = view
        self.views.update(rest)
        if self.current == old:
            self.current = key
        self._first = key
        self.starting = False
        self.server_tabs.rename(old, view)
        self.set_banner(banner, key)
        if self.last is None:
            self._show_connecting()

    def remove_server(self, key: str) -> None:
        """Stop showing a server (the app stops its poller); another one is shown if it was."""
        if key not in self.views or len(self.views) == 1:
            return
        del self.views[key]
        self.server_tabs.remove(key)
        if key == self.current:
            self.select_server(next(iter(self.views)))

    def select_server(self, key: str) -> None:
        """Show another server: its history, points and last snapshot in every panel."""
        if key not in self.views or key == self.current:
            return
        self.current = key
        view = self.views[key]
        self._use_view(view)
        self._banner, self._recording = view.banner, view.recording
        self.rebuild_panels()
        self.speed_time.set_window(WINDOW_RANGES[self.window_range])
        self.set_recording(view.recording)
        self.server_selected.emit(key)

    def _follow(self, name: str | None) -> None:
        self.views[self.current].pinned = name
        self.follow_requested.emit(self.current, name)

    def ask_add_server(self) -> str | None:
        """Ctrl+N: watch another server too (a URL); the app opens it."""
        url, ok = QtWidgets.QInputDialog.getText(self, "Add server", "Server URL (llama-server, router, "
                                                 "llama-swap or Ollama):", text="http://127.0.0.1:9931")
        if ok and url.strip():
            self.add_server_requested.emit(url.strip())
            return url.strip()
        return None

    def _update_tray(self, key: str, s: Snapshot) -> None:
        """The tray shows the busiest server (else the shown one) and tells rising alerts of every server."""
        from kvmon.app.servers import busiest

        assert self.tray is not None
        many = len(self.views) > 1
        label = self.views[key].label if many else None
        self.tray.notify(key, s, label)
        top = busiest({k: v.last for k, v in self.views.items()}) or self.current
        top_view = self.views[top]
        if top_view.last is not None:
            self.tray.show_snapshot(top_view.last, top_view.label if many else None)

