"""The status bar's clock and replay texts: minutes and seconds, hours past an hour, and where a replay stands."""

from __future__ import annotations

from kvmon.gui.panels.status import clock_text, replay_text


def test_the_clock_reads_minutes_and_seconds_then_hours() -> None:
    assert clock_text(0) == "0:00"
    assert clock_text(724.9) == "12:04"
    assert clock_text(3724) == "1:02:04"
    assert clock_text(-3) == "0:00"  # a replay never shows a position before its start


def test_a_replay_says_its_file_speed_position_and_whether_it_is_paused() -> None:
    assert replay_text("run.jsonl", 10, 724, 2890, True) == "replaying run.jsonl · 10× · 12:04 of 48:10"
    assert replay_text("run.jsonl", 0.5, 0, 60, False) == "replaying run.jsonl · 0.5× · 0:00 of 1:00 · paused"
