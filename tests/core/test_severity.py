"""One severity table: every connection status has its level, and the panel, status bar, tabs and tray agree."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from kvmon.core.severity import STATUS_SEVERITY, status_level, worse, worst_alert, worst_level
from kvmon.core.snapshot import Alert, AlertLevel, Connection, ConnectionStatus, Snapshot


def _snap(status: ConnectionStatus, *alerts: Alert) -> Snapshot:
    return Snapshot(seq=1, t_monotonic=0.0, t_wall=1.8e9, connection=Connection(status), alerts=alerts)


def test_every_status_has_a_level_and_a_sleeping_or_loading_server_is_not_trouble() -> None:
    assert set(STATUS_SEVERITY) == set(ConnectionStatus)
    for status in (ConnectionStatus.SLEEPING, ConnectionStatus.LOADING, ConnectionStatus.CONNECTING,
                   ConnectionStatus.PAUSED):
        assert status_level(status) is AlertLevel.INFO
    assert status_level(ConnectionStatus.TIMEOUT) is AlertLevel.WARNING
    assert status_level(ConnectionStatus.BAD_RESPONSE) is AlertLevel.WARNING
    for status in (ConnectionStatus.UNREACHABLE, ConnectionStatus.AUTH_REJECTED, ConnectionStatus.BAD_URL):
        assert status_level(status) is AlertLevel.CRITICAL
    assert status_level(ConnectionStatus.CONNECTED) is None and status_level(ConnectionStatus.REPLAY) is None


def test_the_worst_alert_and_the_worst_of_status_and_alerts() -> None:
    info = Alert(AlertLevel.INFO, "a", "advice")
    warn = Alert(AlertLevel.WARNING, "b", "first warning")
    warn2 = Alert(AlertLevel.WARNING, "c", "second warning")
    assert worst_alert(()) is None and worst_alert((info, warn, warn2)) is warn
    assert worst_alert((info,), at_least=AlertLevel.WARNING) is None
    assert worse(None, AlertLevel.INFO) is AlertLevel.INFO and worse(AlertLevel.CRITICAL, AlertLevel.INFO).rank == 2
    assert worst_level(_snap(ConnectionStatus.CONNECTED)) is None
    assert worst_level(_snap(ConnectionStatus.CONNECTED, info, warn)) is AlertLevel.WARNING
    assert worst_level(_snap(ConnectionStatus.UNREACHABLE, warn)) is AlertLevel.CRITICAL
    assert worst_level(_snap(ConnectionStatus.SLEEPING)) is AlertLevel.INFO


@pytest.mark.parametrize(("status", "panel", "bar", "tab"), [
    (ConnectionStatus.SLEEPING, "info", "info", "ok"),  # asleep: still read, never red
    (ConnectionStatus.LOADING, "info", "info", "muted"),
    (ConnectionStatus.TIMEOUT, "warning", "warning", "warning"),
    (ConnectionStatus.UNREACHABLE, "critical", "critical", "critical"),
])
def test_the_panel_the_status_bar_and_the_tab_give_one_state_one_level(qtbot: object, status: ConnectionStatus,
                                                                      panel: str, bar: str, tab: str) -> None:
    from PySide6 import QtGui

    from kvmon.gui import theme
    from kvmon.gui.panels.alerts import coded_lines
    from kvmon.gui.panels.status import StatusPanel
    from kvmon.gui.server_tabs import tab_colour

    s = _snap(status)
    assert coded_lines(s)[0][0] == panel
    assert tab_colour(s) == tab
    status_bar = StatusPanel()
    qtbot.addWidget(status_bar)  # type: ignore[attr-defined]
    status_bar.update_snapshot(s)
    dot = status_bar.connection.dot
    assert not dot.isHidden()  # the state has its dot
    assert dot.palette().color(QtGui.QPalette.ColorRole.WindowText).name() == theme.color(bar).name()
