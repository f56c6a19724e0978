"""The tray icon: the decode speed in two or three characters, and a tooltip with the headline's words, coloured by
the verdict only when it warns (a server gone is critical, as in the header)."""

from __future__ import annotations

from kvmon.core.snapshot import Connection, ConnectionStatus, Snapshot
from kvmon.core.verdict import decided
from kvmon.gui.tray import tray_text, tray_tip


def test_the_icon_number_fits_three_characters() -> None:
    assert tray_text(41.6) == "42"
    assert tray_text(999.4) == "999"
    assert tray_text(999.6) == "1k+"  # three characters fit the icon; "1000" would not
    assert tray_text(1500.0) == "1k+"


def test_a_server_gone_is_said_in_the_tooltip_and_colours_the_icon_critical() -> None:
    s = decided(Snapshot(1, 0.0, 1.8e9, connection=Connection(ConnectionStatus.UNREACHABLE,
                                                              reason="connection refused")))
    tip, level = tray_tip(s, "llama-server :8080")
    lines = tip.splitlines()
    assert lines[0] == "kvmon: llama-server :8080"
    assert lines[1].startswith("Unreachable: Connection refused.")
    assert level == "critical"


def test_a_server_that_answers_keeps_the_decode_colour() -> None:
    s = decided(Snapshot(2, 0.0, 1.8e9, connection=Connection(ConnectionStatus.CONNECTED), decode_tok_s=41.6))
    tip, level = tray_tip(s)
    assert tip.splitlines()[0] == "kvmon"
    assert "41.6 tok/s" in tip
    assert level is None
