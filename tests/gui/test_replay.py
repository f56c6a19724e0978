"""Replay: a recorded simulator session shows the recorded numbers at any index; slider, 1×/10×/60× playback,
pause, jumps; ``--csv``; the record toggle writes a readable recording."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from synthetic import SyntheticMonitor

from kvmon.app.record import RecordSwitch
from kvmon.app.session import Session
from kvmon.core.recorder import Recorder, read_recording
from kvmon.core.snapshot import Snapshot
from kvmon.gui import fmt, theme
from kvmon.gui.app import build_window, replay_window, run_replay
from kvmon.gui.replay import SPEEDS
from kvmon.gui.settings import Settings


@pytest.fixture(scope="module")
def sim_recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real recording: the simulator over HTTP, polled by a Monitor that records every snapshot."""
    pytest.importorskip("kvmon.sim.server")
    from kvmon.app.demo import demo_session

    path = tmp_path_factory.mktemp("rec") / "sim.jsonl"
    rec = Recorder(path)
    session = demo_session("seed-3090x2", None, speed=40.0, recorder=rec, start_at_s=600.0)
    try:
        mon = session.factory()
        snaps = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            snaps.append(mon.poll())
            if sum(s.decode_tok_s is not None for s in snaps) >= 4 and len(snaps) >= 8:
                break
            time.sleep(0.1)
        mon.close()
    finally:
        rec.close()
        session.close()
    return path


def _check_screen(win, s: Snapshot) -> None:
    h = win.header
    assert fmt.tokens(s.context_tokens).removesuffix(" tokens") in h.context.whole()
    assert f"of {fmt.tokens(s.model.n_ctx)}" in h.context.whole()
    hero = fmt.hero(s)
    assert h.speed.whole() == hero.number and h.efficiency.whole() == hero.against
    assert s.verdict is not None and h.headline.whole() == s.verdict.sentence
    if s.decode_tok_s is not None:
        assert fmt.tok_s(s.decode_tok_s) == h.speed.whole()
        assert f"of {fmt.num_tok_s(s.ceiling_tok_s)} ceiling" in h.efficiency.whole()
        assert fmt.percent(s.efficiency) in h.efficiency.whole()
    else:  # nothing decodes: the last speed measured, its age, the ceiling at this depth, no share
        assert f"· ceiling {fmt.num_tok_s(s.ceiling_tok_s)} tok/s here" in h.efficiency.whole()
    assert fmt.bytes_(s.kv_in_use_bytes) in h.kv.whole()
    bars = win.memory.bars.bars
    for g, bar in zip(s.gpus, bars, strict=False):
        assert fmt.bytes_(g.vram_free_bytes) in bar.note
    assert win.last is s


def test_replay_reproduces_the_recorded_numbers(qtbot, sim_recording: Path, tmp_path: Path) -> None:
    rec = read_recording(sim_recording)
    assert len(rec.snapshots) >= 8 and not rec.skipped_lines
    with_decode = [i for i, s in enumerate(rec.snapshots) if s.decode_tok_s is not None]
    assert with_decode
    win, ctl = replay_window(rec.snapshots, "Replay", Settings(str(tmp_path / "s.ini")))
    qtbot.addWidget(win)
    win.show()
    for i in (with_decode[0], len(rec.snapshots) - 1, 2, with_decode[-1]):  # forward, end, back, forward
        ctl.seek(i)
        _check_screen(win, rec.snapshots[i])
        assert ctl.bar.slider.value() == i
        assert f"{i + 1} / {len(rec.snapshots)}" in ctl.bar.label.text()


def test_slider_moves_the_playhead(qtbot, tmp_path: Path) -> None:
    snaps = [SyntheticMonitor(t0_wall=1e9).snapshot(i) for i in range(1, 31)]
    win, ctl = replay_window(snaps, "Replay", Settings(str(tmp_path / "s.ini")))
    qtbot.addWidget(win)
    win.show()
    ctl.bar.slider.setValue(5)
    assert ctl.index == 5 and win.last is snaps[5]
    _check_screen(win, snaps[5])
    assert len(win.history) == 6  # the window holds the session up to the playhead, as it was live


def _playing_window(qtbot, tmp_path: Path, n: int = 40):
    snaps = [SyntheticMonitor(t0_wall=1e9, poll_dt_s=1.0).snapshot(i) for i in range(1, n + 1)]
    win, ctl = replay_window(snaps, "Replay", Settings(str(tmp_path / "s.ini")))
    qtbot.addWidget(win)
    win.show()
    ctl.seek(0)
    return snaps, win, ctl


def test_sixty_times_plays_a_recorded_minute_in_about_a_second(qtbot, tmp_path: Path) -> None:
    snaps, win, ctl = _playing_window(qtbot, tmp_path)
    ctl.bar.speed_box.setCurrentIndex(SPEEDS.index(60.0))
    t0 = time.monotonic()
    ctl.play()
    assert ctl.playing and ctl.bar.play_btn.text() == "Pause"
    qtbot.waitUntil(lambda: not ctl.playing, timeout=5000)
    took = time.monotonic() - t0
    assert ctl.index == len(snaps) - 1 and win.last is snaps[-1]
    assert 0.4 < took < 3.0, took  # 39 recorded seconds at 60× ≈ 0.65 s
    assert ctl.bar.play_btn.text() == "Play"


def test_ten_times_is_slower_and_pause_stops(qtbot, tmp_path: Path) -> None:
    snaps, win, ctl = _playing_window(qtbot, tmp_path)
    ctl.set_speed(10.0)
    ctl.play()
    qtbot.wait(500)  # ≈ 5 recorded seconds
    ctl.pause()
    at = ctl.index
    assert 2 <= at <= 10, at
    qtbot.wait(300)
    assert ctl.index == at and not ctl.playing
    _check_screen(win, snaps[at])


def test_jumps(qtbot, tmp_path: Path) -> None:
    snaps, win, ctl = _playing_window(qtbot, tmp_path, n=80)
    ctl.bar.end_btn.click()
    assert ctl.index == 79
    ctl.bar.start_btn.click()
    assert ctl.index == 0
    ctl.next_alert()  # the synthetic chat warns when the context is nearly full
    first = next(i for i, s in enumerate(snaps) if s.alerts)
    assert ctl.index == first and win.alerts.lines


def test_play_at_the_end_starts_over(qtbot, tmp_path: Path) -> None:
    _snaps, _win, ctl = _playing_window(qtbot, tmp_path, n=5)
    ctl.seek(4)
    ctl.set_speed(60.0)
    ctl.play()
    assert ctl.index == 0
    qtbot.waitUntil(lambda: not ctl.playing, timeout=3000)
    assert ctl.index == 4
    with pytest.raises(ValueError):
        ctl.set_speed(0)


def test_replay_csv_option_writes_rows_without_a_window(sim_recording: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.csv"
    assert run_replay(argparse.Namespace(file=str(sim_recording), csv=str(out))) == 0
    n = len(read_recording(sim_recording).snapshots)
    assert len(out.read_text().splitlines()) == n + 1


@pytest.mark.parametrize("content", ["", "not json\n", '{"kvmon_recording": 99}\n'])
def test_bad_recordings_exit_2(tmp_path: Path, content: str, capsys) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text(content)
    assert run_replay(argparse.Namespace(file=str(p), csv=None)) == 2
    assert "kvmon:" in capsys.readouterr().err


def test_header_only_recording_exits_2(tmp_path: Path) -> None:
    p = tmp_path / "empty.jsonl"
    Recorder(p).close()
    assert run_replay(argparse.Namespace(file=str(p), csv=str(tmp_path / "x.csv"))) == 2


def test_record_toggle_writes_a_recording_and_survives_reconnects(qtbot, tmp_path: Path) -> None:
    switch = RecordSwitch()

    class RecordingMonitor(SyntheticMonitor):  # records each poll through its recorder, as kvmon.app.monitor does
        recorder = switch

        def poll(self) -> Snapshot:
            snap = super().poll()
            self.recorder.record(snap)
            return snap

    mon = RecordingMonitor()

    def factory():
        return mon

    session = Session(factory, recorder=switch)
    win, poller = build_window(session, Settings(str(tmp_path / "s.ini")), 0.05, tray=False)
    qtbot.addWidget(win)
    win.show()
    poller.start()
    try:
        out = tmp_path / "live.jsonl"
        win.toggle_recording(str(out))
        assert win.record_action.isChecked() and "recording" in win.status.recording.text()
        seen_before = mon.seq
        qtbot.waitUntil(lambda: mon.seq >= seen_before + 5, timeout=5000)
        switch.close()  # what a monitor does on reconnect: the recording goes on
        qtbot.waitUntil(lambda: mon.seq >= seen_before + 8, timeout=5000)
        win.toggle_recording()
        assert not win.record_action.isChecked() and "not recording" in win.status.recording.text()
        rec = read_recording(out)
        assert len(rec.snapshots) >= 7 and not rec.skipped_lines
        qtbot.waitUntil(lambda: win.tally.n >= len(rec.snapshots), timeout=3000)  # the window saw them too
    finally:
        poller.stop()


def test_record_to_an_unwritable_path_says_so(qtbot, tmp_path: Path) -> None:
    session = Session(SyntheticMonitor, recorder=RecordSwitch())
    win, _poller = build_window(session, Settings(str(tmp_path / "s.ini")), 1.0, tray=False)
    qtbot.addWidget(win)
    win.toggle_recording(str(tmp_path / "no" / "such" / "dir.jsonl"))
    assert not win.record_action.isChecked()
    assert "Cannot record" in win.statusBar().currentMessage()


def test_the_status_bar_says_which_file_how_fast_and_where(qtbot, tmp_path: Path) -> None:
    # 48:10 of recording, one snapshot every 10 s
    snaps = [SyntheticMonitor(t0_wall=1e9, poll_dt_s=10.0).snapshot(i) for i in range(0, 290)]
    win, ctl = replay_window(snaps, "Replay", Settings(str(tmp_path / "s.ini")), name="chat.jsonl")
    qtbot.addWidget(win)
    win.show()
    assert win.status.connection.text() == "replaying chat.jsonl · 1× · 48:10 of 48:10 · paused"
    assert not win.status.polled.isVisible()  # "polled N s ago" belongs to the recorded session, not to now
    ctl.bar.speed_box.setCurrentIndex(SPEEDS.index(10.0))
    ctl.seek(72)  # 720 s in
    assert win.status.connection.text() == "replaying chat.jsonl · 10× · 12:00 of 48:10 · paused"
    ctl.seek(0)  # backwards: the window is reset and loaded again, the words stay
    assert win.status.connection.text().startswith("replaying chat.jsonl · 10× · 0:00 of 48:10")
    ctl.play()
    assert win.status.connection.text() == "replaying chat.jsonl · 10× · 0:00 of 48:10"
    ctl.pause()
    win.apply_scheme(not theme.is_dark())  # a rebuilt status bar
    assert win.status.connection.text().startswith("replaying chat.jsonl · 10×")


def test_a_replay_leaves_the_snapshots_in_the_file(qtbot, sim_recording: Path, tmp_path: Path) -> None:
    """``kvmon replay`` reads each snapshot again when it is shown, so a day's recording is not a day of Snapshots
    in memory; the screen shows the same numbers as from a recording held in memory."""
    from kvmon.core.recorder import RecordedSnapshots
    from kvmon.gui.app import open_replay

    held = read_recording(sim_recording).snapshots
    lazy = read_recording(sim_recording, lazy=True).snapshots
    assert isinstance(lazy, RecordedSnapshots) and len(lazy) == len(held)
    opened, octl = open_replay(str(sim_recording), Settings(str(tmp_path / "o.ini")))  # filled as the file is read
    qtbot.addWidget(opened)
    assert octl.index == len(held) - 1 and opened.last == held[-1] and len(opened.history) == len(held)
    assert list(lazy.times) == [s.t_wall for s in held]
    assert [lazy.alert_codes(i) for i in range(len(lazy))] == [frozenset(a.code for a in s.alerts) for s in held]
    assert list(lazy[2:5]) == list(held[2:5]) and lazy[-1] == held[-1]
    win, ctl = replay_window(lazy, "Replay", Settings(str(tmp_path / "s.ini")))
    qtbot.addWidget(win)
    win.show()
    for i in (len(held) - 1, 2, len(held) // 2):  # end, back, forward
        ctl.seek(i)
        assert win.last == held[i] and ctl.index == i
        assert f"{i + 1} / {len(held)}" in ctl.bar.label.text()
    assert len(win.history) == len(held) // 2 + 1


def test_a_recording_cut_under_the_replay_stops_it_with_the_reason(qtbot, sim_recording: Path,
                                                                    tmp_path: Path) -> None:
    copy = tmp_path / "cut.jsonl"
    copy.write_bytes(sim_recording.read_bytes())
    lazy = read_recording(copy, lazy=True).snapshots
    win, ctl = replay_window(lazy, "Replay", Settings(str(tmp_path / "s.ini")), name="cut.jsonl")
    qtbot.addWidget(win)
    win.show()
    ctl.seek(0)
    lines = copy.read_bytes().splitlines(keepends=True)
    copy.write_bytes(b"".join(lines[:3]))  # the header and two snapshots left
    ctl.seek(len(lazy) - 1)
    assert ctl.index == 0  # it stays where the file still read
    said = win.status.replaying or ""
    assert said.startswith("replay stopped:") and "cut.jsonl changed on disk" in said


def test_a_click_on_the_slider_jumps_there_and_the_plot_shows_no_point_past_it(qtbot, tmp_path: Path) -> None:
    """A click on the slider's groove goes to the time under the mouse (not ten snapshots on), and the speed-vs-
    context plot then shows what the window showed at that time: no measured point deeper than the cursor."""
    from PySide6 import QtCore, QtWidgets

    snaps = [SyntheticMonitor(t0_wall=1e9, tokens_per_poll=150).snapshot(i) for i in range(1, 61)]
    win, ctl = replay_window(snaps, "Replay", Settings(str(tmp_path / "s.ini")))
    qtbot.addWidget(win)
    win.resize(1280, 800)
    win.show()
    qtbot.waitExposed(win)
    slider = ctl.bar.slider
    ctl.seek(0)
    opt = QtWidgets.QStyleOptionSlider()
    slider.initStyleOption(opt)
    groove = slider.style().subControlRect(QtWidgets.QStyle.ComplexControl.CC_Slider, opt,
                                           QtWidgets.QStyle.SubControl.SC_SliderGroove, slider)
    at = QtCore.QPoint(groove.left() + int(groove.width() * 0.75), groove.center().y())
    qtbot.mouseClick(slider, QtCore.Qt.MouseButton.LeftButton, pos=at)
    assert abs(ctl.index - 0.75 * (len(snaps) - 1)) <= 3, ctl.index  # there, not a page step (10) on
    for i in (ctl.index, 20, 7):
        ctl.seek(i)
        x, _y = win.speed_context.measured.getData()
        assert x is not None and len(x) and float(max(x)) <= snaps[i].context_tokens
        assert win.speed_context.here.position()[0] == snaps[i].context_tokens
