"""The alerts panel: most severe first, plain text as written (commands without their backticks, markup shown
literally), one line for a connection that keeps failing, and tooltips in words (no code)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from PySide6 import QtCore, QtWidgets
from synthetic import SyntheticMonitor

from kvmon.core.snapshot import Activity, Alert, AlertLevel, Connection, ConnectionStatus
from kvmon.gui.panels.alerts import AlertsPanel, coded_lines
from kvmon.gui.tray import Tray


@pytest.fixture
def panel(qapp: QtWidgets.QApplication) -> Iterator[AlertsPanel]:
    p = AlertsPanel()
    p.resize(900, 200)
    p.show()
    yield p
    p.close()
    p.deleteLater()


def test_most_severe_first_and_the_connection_states() -> None:
    s = SyntheticMonitor().snapshot(1)
    s = dataclasses.replace(s, alerts=(
        Alert(AlertLevel.INFO, "kv_cache_advice", "`-ctk q8_0 -ctv q8_0` would give ~51 tok/s here"),
        Alert(AlertLevel.CRITICAL, "kv_in_host", "KV cache in host RAM: decode capped at ~6 tok/s by PCIe"),
        Alert(AlertLevel.WARNING, "ctx_full_soon", "context full in ~2,300 tokens"),
    ))
    lines = coded_lines(s)
    assert [lvl for lvl, _t, _tip, _code in lines] == ["critical", "warning", "info"]
    assert [tip for *_x, tip, _code in lines] == ["KV cache in host RAM (critical)", "Context filling up (warning)",
                                           "Cheaper KV cache type (note)"]
    assert lines[2][1] == "-ctk q8_0 -ctv q8_0 would give ~51 tok/s here"
    rejected = dataclasses.replace(s, alerts=(), connection=Connection(ConnectionStatus.AUTH_REJECTED, "HTTP 401"))
    (level, text, _tip, _code), = coded_lines(rejected)
    assert level == "critical" and "API key rejected" in text and "HTTP 401" in text
    loading = dataclasses.replace(s, alerts=(), activity=Activity.LOADING,
                                  connection=Connection(ConnectionStatus.LOADING))
    assert "Model loading" in coded_lines(loading)[0][1]


def test_a_failing_connection_is_one_line_with_its_count(panel: AlertsPanel) -> None:
    gone = Connection(ConnectionStatus.UNREACHABLE, "cannot connect to http://127.0.0.1:1 (Connection refused)")
    s = dataclasses.replace(SyntheticMonitor().snapshot(1), connection=gone, alerts=(
        Alert(AlertLevel.CRITICAL, "connection", "Server gone — reconnecting: cannot connect to http://127.0.0.1:1 "
              "(Connection refused) (6 failed polls over 12 s)"),))
    panel.update_snapshot(s)
    assert panel.text() == ("Server gone — reconnecting: cannot connect to http://127.0.0.1:1 (Connection refused) "
                            "(6 failed polls over 12 s)")
    panel.update_snapshot(dataclasses.replace(s, alerts=()))  # the first seconds: the state alone, once
    assert panel.text().count("Server gone") == 1


def test_lines_are_plain_text_as_written(panel: AlertsPanel) -> None:
    s = dataclasses.replace(SyntheticMonitor().snapshot(1), alerts=(
        Alert(AlertLevel.WARNING, "kv_in_host", "KV cache in host RAM; use `-ctk q8_0 -ctv q8_0` <b>now</b>"),))
    panel.update_snapshot(s)
    assert panel.text() == "KV cache in host RAM; use -ctk q8_0 -ctv q8_0 <b>now</b>"
    labels = panel.findChildren(QtWidgets.QLabel)
    assert labels and all(w.textFormat() == QtCore.Qt.TextFormat.PlainText for w in labels)
    tray = Tray()
    tray.notify("main", s)
    assert tray.notified == ["KV cache in host RAM; use -ctk q8_0 -ctv q8_0 <b>now</b>"]
    panel.update_snapshot(dataclasses.replace(s, alerts=()))
    assert panel.text() == "No alerts."


def test_a_loading_models_line_names_it_once_without_a_dangling_ellipsis() -> None:
    from kvmon.core.snapshot import Connection, ConnectionStatus, Snapshot
    from kvmon.gui.panels.alerts import coded_lines

    s = Snapshot(seq=1, t_monotonic=0.0, t_wall=1.8e9,
                 connection=Connection(ConnectionStatus.LOADING, reason="gemma-3-12b loading"))
    assert coded_lines(s)[0][:2] == ("info", "Model loading: gemma-3-12b loading")
    bare = Snapshot(seq=1, t_monotonic=0.0, t_wall=1.8e9, connection=Connection(ConnectionStatus.LOADING))
    assert coded_lines(bare)[0][:2] == ("info", "Model loading…")


def test_a_line_that_comes_and_goes_keeps_its_room_for_the_hold_time(panel: AlertsPanel,
                                                                      qapp: QtWidgets.QApplication) -> None:
    """A cause line that appears at one poll and not the next must not move the window at every poll: its room stays,
    blank, for as long as a raised alert is held, then is given back."""
    from kvmon.core.snapshot import SlowdownCause
    from kvmon.gui.panels.alerts import HOLD_S

    base = dataclasses.replace(SyntheticMonitor().snapshot(1), alerts=(
        Alert(AlertLevel.INFO, "kv_cache_advice", "`-ctk q8_0 -ctv q8_0` would give ~51 tok/s here"),))
    cause = SlowdownCause("unexplained", 0.4, "below what is typical",
                          "Attention and kernel overhead at 12.8K: typical for this model kind is 65%–85% of the "
                          "ceiling (62% now, below it)")

    def at(t: float, with_cause: bool) -> int:
        panel.update_snapshot(dataclasses.replace(base, t_monotonic=t,
                                                  slowdown_causes=(cause,) if with_cause else ()))
        qapp.processEvents()
        return panel.sizeHint().height()

    tall = at(100.0, True)
    assert "Attention and kernel overhead" in panel.text()
    assert at(101.0, False) == tall and "Attention" not in panel.text()  # blank, its room kept
    assert at(102.0, True) == tall and at(103.0, False) == tall
    assert at(103.0 + HOLD_S - 1, False) == tall
    assert at(103.0 + HOLD_S + 1, False) < tall  # gone long enough: the room is given back
    assert panel.text().count("\n") == 0
