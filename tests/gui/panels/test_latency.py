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
