"""The report card: figures summed up from a session, and an image that is not blank, from live or replay."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from PySide6 import QtGui, QtWidgets
from synthetic import SyntheticMonitor

import kvmon
from kvmon.core.snapshot import Connection, ConnectionStatus, Snapshot
from kvmon.core.summary import summarize
from kvmon.gui import reportcard
from kvmon.gui.app import replay_window
from kvmon.gui.settings import Settings


def _snaps(n: int = 80) -> list[Snapshot]:
    mon = SyntheticMonitor(t0_wall=1_764_000_000.0)
    return [mon.snapshot(i) for i in range(1, n + 1)]


def _colours(img: QtGui.QImage) -> int:
    small = img.convertToFormat(QtGui.QImage.Format.Format_RGB32).scaled(200, 120)
    arr = np.frombuffer(small.constBits(), dtype=np.uint32, count=small.width() * small.height())
    return len(np.unique(arr))


def test_card_png_is_not_blank(qtbot, tmp_path: Path) -> None:
    out = tmp_path / "card.png"
    reportcard.save(_snaps(), out)
    img = QtGui.QImage(str(out))
    assert not img.isNull()
    assert img.width() >= reportcard.CARD_SIZE[0] and img.height() >= reportcard.CARD_SIZE[1]
    assert _colours(img) > 30


def test_card_texts_say_what_the_session_was(qtbot) -> None:
    card = reportcard.ReportCard(summarize(_snaps()))
    qtbot.addWidget(card)
    text = " ".join(lbl.text() for lbl in card.findChildren(QtWidgets.QLabel))
    for needle in ("Meta-Llama-3.1-8B-Instruct", "2× NVIDIA GeForce RTX 3090", "Context filling up",
                   f"kvmon {kvmon.__version__}", "Efficiency", "peak"):
        assert needle in text, needle
    assert "ctx_full_soon" not in text and "?" not in text  # the user's words, no internal name


def test_card_of_an_empty_or_failed_session_still_renders(qtbot) -> None:
    down = Snapshot(seq=1, t_monotonic=0.0, t_wall=1e9, connection=Connection(ConnectionStatus.UNREACHABLE, "x"))
    for snaps in ([], [down]):
        img = reportcard.render(snaps)
        assert not img.isNull()


def test_report_card_from_replay_is_up_to_the_playhead(qtbot, tmp_path: Path) -> None:
    snaps = _snaps()
    win, ctl = replay_window(snaps, "Replay", Settings(str(tmp_path / "s.ini")))
    qtbot.addWidget(win)
    ctl.seek(19)
    seen: list = []
    real = reportcard.save

    def spy(summary, path, *a):
        seen.append(summary)
        return real(summary, path, *a)

    reportcard.save = spy  # type: ignore[assignment]
    try:
        out = win.save_report_card(str(tmp_path / "r.png"))
    finally:
        reportcard.save = real
    assert out and Path(out).exists()
    assert seen[0].n_snapshots == 20 and seen[0].final_context_tokens == snaps[19].context_tokens


def test_report_card_action_reports_an_unwritable_path(qtbot, tmp_path: Path) -> None:
    win, _ctl = replay_window(_snaps(5), "Replay", Settings(str(tmp_path / "s.ini")))
    qtbot.addWidget(win)
    assert win.save_report_card(str(tmp_path / "missing" / "r.png")) is None
    assert "Report card failed" in win.statusBar().currentMessage()


def test_final_speed_comes_from_the_last_decoding_snapshot() -> None:
    snaps = _snaps(10)
    idle = dataclasses.replace(snaps[-1], seq=11, t_wall=snaps[-1].t_wall + 1, decode_tok_s=None, efficiency=None)
    sm = summarize([*snaps, idle])
    assert sm.last is idle and sm.last_decoding is snaps[-1]
    assert sm.final_efficiency == snaps[-1].efficiency
    facts = dict(reportcard._facts(sm))
    assert f"last {reportcard.fmt_tok_s(snaps[-1].decode_tok_s)}" in facts["Decode"]


def test_live_report_card_covers_the_session_so_far(qtbot, tmp_path: Path) -> None:
    from kvmon.app.session import Session
    from kvmon.gui.app import build_window

    win, poller = build_window(Session(SyntheticMonitor), Settings(str(tmp_path / "s.ini")), 0.05, tray=False)
    qtbot.addWidget(win)
    win.show()
    poller.start()
    try:
        qtbot.waitUntil(lambda: win.tally.n >= 5, timeout=5000)
    finally:
        poller.stop()
    out = win.save_report_card(str(tmp_path / "live.png"))
    assert out and _colours(QtGui.QImage(out)) > 30
    assert win.tally.summary().peak_context_tokens == max(1200 + i * 400 for i in range(1, win.tally.n + 1))


def test_card_says_the_sessions_replies_and_energy(qtbot, tmp_path: Path) -> None:
    """The demo's two RTX 3090s: the card sums the session's replies and its energy per token, as the last snapshot
    counts them (the dashboard's figures, not new ones)."""
    from story_window import demo_snapshots

    snaps = demo_snapshots("seed-3090x2", 0.0, 60.0, 2.0)
    last = snaps[-1]
    assert last.latency is not None and last.energy is not None and last.energy.joules_per_token
    card = reportcard.ReportCard(summarize(snaps))
    qtbot.addWidget(card)
    text = " ".join(lbl.text() for lbl in card.findChildren(QtWidgets.QLabel))
    assert "Replies" in text and "first token " in text and "/token (p95 " in text
    assert f"{last.energy.joules_per_token:.1f} J/token" in text and "(2× NVIDIA GeForce RTX 3090)" in text
    out = tmp_path / "card.png"
    reportcard.save(snaps, out)
    assert not QtGui.QImage(str(out)).isNull()
