"""The Replies line on the dashboard: each reply's wait for its first token and its time per token, agreeing with the
decode speed on the same screen."""

from __future__ import annotations

import pytest


def test_the_dashboard_shows_the_replies_line() -> None:
    """The demo's chat turns end replies: the window says their first-token wait and per-token latency, and the
    per-token figure agrees with the decode speed on the same screen."""
    import os

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from stories import Watch
    from story_window import watch_in_window

    seen: list[tuple[str, object]] = []
    watch_in_window("seed-3090x2", Watch(20.0, 50.0, step_s=2.0),
                    on_poll=lambda win, _s: seen.append((win.latency.label.text(), win.last)))  # type: ignore[attr-defined]
    text, snap = seen[-1]
    assert text.startswith("first token ") and "/token (p95 " in text and "repl" in text
    lat = snap.latency  # type: ignore[attr-defined]
    assert lat is not None and lat.itl_last_s is not None
    decoded = [s.decode_tok_s for _t, s in seen if s.decode_tok_s]  # type: ignore[attr-defined]
    assert decoded and 1 / lat.itl_last_s == pytest.approx(max(decoded), rel=0.1)


def test_the_line_and_its_tooltip_follow_every_figure_they_show(qapp: object) -> None:
    """A poll that moves only a percentile, or only the last reply's prompt, shows it (nothing the line reads is left
    out of what decides whether it is set again)."""
    from dataclasses import replace

    from kvmon.core.snapshot import Connection, ConnectionStatus, LatencyView, Snapshot
    from kvmon.gui.panels.latency import LatencyPanel

    lat = LatencyView(replies=3, source="server counters", ttft_last_s=0.5, ttft_p50_s=0.5, ttft_p95_s=0.9,
                      itl_last_s=0.02, itl_p50_s=0.02, itl_p95_s=0.03, last_prompt_tokens=100, last_prefill_tok_s=900.0)
    s = Snapshot(seq=1, t_monotonic=0.0, t_wall=0.0, connection=Connection(ConnectionStatus.CONNECTED), latency=lat)
    panel = LatencyPanel()
    panel.update_snapshot(s)
    assert "(p95 30.0 ms)" in panel.label.text() and "for 100 prompt tokens" in panel.label.toolTip()
    panel.update_snapshot(replace(s, seq=2, latency=replace(lat, itl_p95_s=0.045)))
    assert "(p95 45.0 ms)" in panel.label.text()
    panel.update_snapshot(replace(s, seq=3, latency=replace(lat, itl_p95_s=0.045, last_prompt_tokens=2048)))
    assert "for 2,048 prompt tokens" in panel.label.toolTip()
