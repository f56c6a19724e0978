"""The window's menu actions: recording, the report card and CSV, pause, time range, scheme, panels, help.

Mixed into ``MainWindow`` (as ``WatchedServers`` is): it uses the window's settings, panels, menus and signals,
which the window defines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.core.snapshot import Snapshot
from kvmon.gui import theme
from kvmon.gui.settings import PANELS, WINDOW_RANGES, Settings

if TYPE_CHECKING:
    _Window = QtWidgets.QMainWindow  # what it is mixed into
else:
    _Window = object


class WindowActions(_Window):
    """What the File, View and Help menus do (the window builds the menus and the panels)."""

    settings: Settings
    last: Snapshot | None
    paused: bool
    window_range: str
    tally: Any
    menus: Any
    status: Any
    report_snapshots: Callable[[], Sequence[Snapshot]] | None
    _recording: str | None
    _speed_time: Any
    switchable: dict[str, QtWidgets.QWidget]  # the panels View ▸ Panels switches, by their names in PANELS
    _right: QtWidgets.QWidget
    _replies_box: QtWidgets.QWidget
    record_requested: QtCore.Signal
    pause_toggled: QtCore.Signal

    if TYPE_CHECKING:  # the window's own
        def set_recording(self, path: str | None, key: str | None = None) -> None: ...
        def apply_scheme(self, dark: bool) -> None: ...

    def toggle_recording(self, path: str | None = None) -> None:
        """Ctrl+R: start recording (asks for a file) or stop; the app does the writing."""
        from kvmon.gui import caption, export

        if self._recording:
            self.record_requested.emit(None)
            return
        path = path or export.ask_path(self, "Record session to", caption.default_filename(self.last, "jsonl"),
                                       "kvmon recording (*.jsonl)")
        if path:
            self.record_requested.emit(path)
        else:
            self.set_recording(self._recording)

    def _session_snapshots(self) -> Sequence[Snapshot] | None:
        return self.report_snapshots() if self.report_snapshots is not None else None

    def _save_file(self, title: str, name: str, filt: str, path: str | None, write: Callable[[str], object],
                   failed: Callable[[OSError], str]) -> str | None:
        """Write to ``path`` (asked for when None, ``name`` suggested) and say in the status bar how it went."""
        from kvmon.gui import export

        path = path or export.ask_path(self, title, name, filt)
        if not path:
            return None
        try:
            write(path)
        except OSError as exc:
            self.statusBar().showMessage(failed(exc), 6000)
            return None
        self.statusBar().showMessage(f"Saved {path}", 6000)
        return path

    def save_report_card(self, path: str | None = None) -> str | None:
        """Ctrl+Shift+R: the session's report card as PNG."""
        from kvmon.core.summary import summarize
        from kvmon.gui import caption, reportcard

        def write(p: str) -> None:
            snaps = self._session_snapshots()
            reportcard.save(summarize(snaps) if snaps is not None else self.tally.summary(), p)

        return self._save_file("Save report card", caption.default_filename(self.last, "png", what="report"),
                               "PNG (*.png)", path, write, lambda exc: f"Report card failed: {exc}")

    def save_recording_csv(self, path: str | None = None) -> str | None:
        """The replayed recording as CSV (one row per snapshot)."""
        from kvmon.core.recording_csv import write_csv
        from kvmon.gui import caption

        snaps = self._session_snapshots()
        if snaps is None:
            return None
        return self._save_file("Export recording as CSV", caption.default_filename(self.last, "csv"), "CSV (*.csv)",
                               path, lambda p: write_csv(snaps, p),
                               lambda exc: f"CSV export failed: {exc.strerror or exc}")

    def toggle_pause(self) -> None:
        """Space: pause or resume polling."""
        self.paused = not self.paused
        self.pause_toggled.emit(self.paused)
        self._check("pause", self.paused)
        if self.paused:
            self.status.connection.set("● paused (Space to resume)", "Polling is paused")

    def set_window_range(self, name: str) -> None:
        """1/2/3: the visible time window (5 min / 1 h / session)."""
        if name not in WINDOW_RANGES:
            return
        self.window_range = name
        self.settings.window_range = name
        if self._speed_time is not None:  # else the plot takes it when it is made
            self._speed_time.set_window(WINDOW_RANGES[name])
            from kvmon.gui.widgets import set_title

            set_title(self._speed_time.plot, f"Speed over time · {name}")
        self._check(f"range:{name}")

    def set_scheme(self, scheme: str) -> None:
        """View ▸ Theme: follow the desktop, or light or dark whatever it says; remembered."""
        self.settings.scheme = scheme
        self._check(f"scheme:{self.settings.scheme}")
        self.apply_scheme(theme.system_dark() if self.settings.scheme == "system" else scheme == "dark")

    def toggle_panel(self, name: str) -> None:
        """View ▸ Panels: show or hide one panel (or the toolbar); remembered."""
        self.settings.hidden_panels = self.settings.hidden_panels ^ {name}
        self._apply_panels()

    def _apply_panels(self) -> None:
        hidden = self.settings.hidden_panels
        for name, w in self.switchable.items():
            w.setVisible(name not in hidden)
        for box in (self._replies_box, self._right):  # a box whose panels are all off takes no room
            box.setVisible(any(not w.isHidden() for w in self.switchable.values() if box.isAncestorOf(w)))
        tb = getattr(self, "toolbar", None)
        if tb is not None:
            tb.setVisible("toolbar" not in hidden)
        for name in PANELS:
            self._check(f"panel:{name}", name not in hidden)

    def _check(self, key: str, on: bool = True) -> None:
        """Tick (or untick) a menu entry, once the menus are made."""
        act = self.menus.actions.get(key) if hasattr(self, "menus") else None
        if act is not None:
            act.setChecked(on)

    # --- help --------------------------------------------------------------------------------------
    def _help(self, title: str, text: str) -> QtWidgets.QDialog:
        from kvmon.gui.help import HelpDialog

        dlg = HelpDialog(title, text, self)
        dlg.show()
        return dlg

    def show_shortcuts(self) -> QtWidgets.QDialog:
        """Help ▸ Keyboard shortcuts: every action's keys (the replay's too, in a replay)."""
        from kvmon.gui import help as help_mod

        rows = help_mod.shortcut_rows(self.findChildren(QtGui.QAction), getattr(self, "extra_shortcuts", ()))
        return self._help("Keyboard shortcuts", help_mod.shortcuts_html(rows))

    def show_numbers_help(self) -> QtWidgets.QDialog:
        """Help ▸ What the numbers mean."""
        from kvmon.gui import help as help_mod

        return self._help("What the numbers mean", help_mod.numbers_html())

    def show_about(self) -> QtWidgets.QDialog:
        """Help ▸ About kvmon."""
        from kvmon.gui import help as help_mod

        return self._help("About kvmon", help_mod.about_html())
