"""The dashboard on the simulator over real HTTP: panel numbers, alert lead times, a hang, a restart, a steady hour."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")
pytest.importorskip("kvmon.sim.server", reason="the simulator is not available")

from PySide6 import QtCore

from kvmon.app.demo import demo_session
from kvmon.app.session import Session
from kvmon.core.snapshot import AlertLevel, ConnectionStatus, Snapshot
from kvmon.gui import fmt
from kvmon.gui.app import build_window
from kvmon.gui.settings import Settings

GIB = 1024**3


class Run:
    """A dashboard on a simulated server; records (simulated time, snapshot) as the window receives them."""

    def __init__(self, qtbot, tmp_path: Path, scenario, *, speed: float, interval_s: float,
                 faults: tuple[str, ...] = (), timeout_s: float = 3.0, tray: bool = False) -> None:
        # the demo session stamps readings with the simulator's clock: alert times are simulated seconds
        self.session: Session = demo_session(scenario, None, speed=speed, faults=faults, timeout_s=timeout_s)
        self.sim = self.session.sim
        self.win, self.poller = build_window(self.session, Settings(str(tmp_path / "s.ini")), interval_s, tray=tray)
        qtbot.addWidget(self.win)
        self.seen: list[tuple[float, Snapshot]] = []
        self.shown: list[list[tuple[str, str, str]]] = []  # the alert panel's lines after each snapshot
        self.poller.snapshot.connect(self._record)
        self.win.resize(1280, 800)
        self.win.show()
        self.poller.start()

    def _record(self, s: Snapshot) -> None:  # connected after the window's slot: sees what it rendered
        self.seen.append((self.sim.clock.now(), s))
        self.shown.append(self.win.alerts.lines)

    def stop(self) -> None:
        self.poller.stop()
        self.session.close()


@pytest.fixture
def runs():
    made: list[Run] = []
    yield made
    for r in made:
        r.stop()


def test_seed_run_panels_show_the_snapshot_numbers(qtbot, tmp_path: Path, runs) -> None:
    r = Run(qtbot, tmp_path, "seed-3090x2", speed=20, interval_s=0.1)
    runs.append(r)
    qtbot.waitUntil(lambda: any(s.decode_tok_s is not None for _t, s in r.seen), timeout=20000)
    r.poller.set_paused(True)
    qtbot.wait(200)
    s = r.win.last
    assert s is not None and s.connection.status is ConnectionStatus.CONNECTED
    h = r.win.header
    assert "llama-server" == h.backend.whole()
    # the server says its -m path (no --alias): the header names the model by the GGUF's general.name
    assert s.model.server_name is not None and s.model.server_name.endswith("/Qwen3.5-27B-Q4_K_M.gguf")
    assert s.model.name == "Qwen3.5 27B"
    assert h.model.whole() == "Qwen3.5 27B" and h.details.whole().startswith("qwen35 · 27.2B · Q4_K")
    assert h.gpus.whole() == "2× NVIDIA GeForce RTX 3090"
    assert "of 262K tokens" in h.context.whole()
    assert fmt.tokens(s.context_tokens).removesuffix(" tokens") in h.context.whole()
    # the pause may land between two replies: the big number is the speed now, or the last one measured
    assert h.speed.whole() == fmt.tok_s(s.decode_tok_s if s.decode_tok_s is not None else s.last_decode.tok_s)
    bars = r.win.memory.bars.bars
    assert [b.label for b in bars[:2]] == ["GPU 0", "GPU 1"] and bars[0].total == 24 * GIB
    g0 = s.gpus[0]
    assert fmt.bytes_(g0.vram_free_bytes) in bars[0].note
    weights = next(seg for seg in bars[0].segments if seg.quantity == "weights")
    assert weights.value == g0.weights_bytes
    assert len(r.win.bandwidth.bars.bars) == 2
    assert r.win.bins.points()[0].size >= 1


@pytest.mark.slow
def test_spill_alerts_rise_early_enough(qtbot, tmp_path: Path, runs) -> None:
    # The shipped scenario, 60× accelerated (readings on the simulated clock): other VRAM grows from 120 s to
    # 300 s, the model reloads at 330 s with a context that no longer fits.
    r = Run(qtbot, tmp_path, "spill-4090", speed=60, interval_s=0.05, tray=True)
    runs.append(r)
    qtbot.waitUntil(lambda: bool(r.seen) and r.seen[-1][0] >= 330, timeout=40000)
    alert_ts = [t for t, s in r.seen if any(a.code == "vram_full_soon" for a in s.alerts)]
    out_ts = [t for t, s in r.seen if s.gpus and s.gpus[0].vram_free_bytes is not None
              and s.gpus[0].vram_free_bytes < 1 * GIB]
    assert alert_ts and out_ts, "the VRAM alert never rose, or free VRAM never ran out"
    print(f"VRAM alert at {alert_ts[0]:.0f} s, free VRAM < 1 GiB at {out_ts[0]:.0f} s (simulated)")
    assert out_ts[0] - alert_ts[0] >= 30, (alert_ts[0], out_ts[0])
    ctx = [s for _t, s in r.seen if any(a.code == "ctx_full_soon" for a in s.alerts)]
    assert ctx, "the context-full alert never rose"
    print(f"context alert at {ctx[0].context_tokens} of {ctx[0].model.n_ctx} tokens")
    assert ctx[0].model.n_ctx - ctx[0].context_tokens >= 2000
    assert any("VRAM full" in m for m in r.win.tray.notified)
    assert any("VRAM full" in text for lines in r.shown for _level, text, _tip in lines)
    assert any("Context full" in text for lines in r.shown for _level, text, _tip in lines)


@pytest.mark.slow
def test_gui_never_stalls_during_a_ten_second_hang(qtbot, tmp_path: Path, runs) -> None:
    r = Run(qtbot, tmp_path, "spill-4090", speed=1, interval_s=0.2, faults=("hang:10@4",), timeout_s=1.0)
    runs.append(r)
    gaps: list[float] = []
    last = [time.perf_counter()]

    def tick() -> None:
        now = time.perf_counter()
        gaps.append(now - last[0])
        last[0] = now

    timer = QtCore.QTimer()
    timer.setTimerType(QtCore.Qt.TimerType.PreciseTimer)
    timer.timeout.connect(tick)
    qtbot.waitUntil(lambda: any(s.connection.status is ConnectionStatus.CONNECTED for _t, s in r.seen),
                    timeout=10000)
    qtbot.waitUntil(lambda: r.sim.clock.now() >= 4.0, timeout=10000)
    last[0] = time.perf_counter()
    timer.start(10)
    qtbot.waitUntil(lambda: r.sim.clock.now() >= 14.0, timeout=20000)
    timer.stop()
    statuses = [s.connection.status for t, s in r.seen if 4.0 <= t <= 14.5]
    assert ConnectionStatus.TIMEOUT in statuses
    assert len(gaps) > 300
    gaps.sort()
    p99 = gaps[int(len(gaps) * 0.99)]
    # A GUI thread blocked by the hung server would stall for the 1 s source timeout or the whole 10 s.
    # On an oversubscribed machine the scheduler alone can pause any process for a while, so the 100 ms
    # bound is checked when there are free cores and the weaker bound (well under the timeout) otherwise.
    busy = os.getloadavg()[0] > (os.cpu_count() or 1)
    limit = 0.5 if busy else 0.100
    assert gaps[-1] < limit, f"GUI stalled {gaps[-1] * 1000:.0f} ms (p99 {p99 * 1000:.0f} ms, busy={busy})"
    assert p99 < 0.100, f"p99 event-loop gap {p99 * 1000:.0f} ms"
    qtbot.waitUntil(lambda: r.seen[-1][1].connection.status is ConnectionStatus.CONNECTED, timeout=15000)


def test_reconnects_after_a_server_restart(qtbot, tmp_path: Path, runs) -> None:
    r = Run(qtbot, tmp_path, "spill-4090", speed=4, interval_s=0.1, faults=("restart:2@6",))
    runs.append(r)
    qtbot.waitUntil(lambda: any(s.connection.status is ConnectionStatus.CONNECTED for _t, s in r.seen),
                    timeout=10000)
    qtbot.waitUntil(lambda: bool(r.seen) and r.seen[-1][0] >= 9, timeout=20000)
    qtbot.waitUntil(lambda: r.seen[-1][1].connection.status is ConnectionStatus.CONNECTED, timeout=10000)
    statuses = [s.connection.status for _t, s in r.seen]
    up = statuses.index(ConnectionStatus.CONNECTED)
    down = [i for i, st in enumerate(statuses) if i > up and st is not ConnectionStatus.CONNECTED]
    assert down, "the restart was not noticed"
    assert statuses[down[0]] in (ConnectionStatus.LOADING, ConnectionStatus.UNREACHABLE)
    assert statuses[-1] is ConnectionStatus.CONNECTED and len(r.win.history) == len(r.seen)


@pytest.mark.slow
def test_no_alert_rises_in_a_steady_hour(qtbot, tmp_path: Path, runs) -> None:
    from kvmon.sim.scenarios import SCENARIOS, ChatScript

    steady = dataclasses.replace(
        SCENARIOS["spill-4090"], name="steady-4090", other_vram=((0.0, 1 * GIB),), reload=None,
        script=ChatScript(n_turns=6, first_prompt_tokens=800, target_context_tokens=6000, generated_tokens=300,
                          think_s=30.0))
    r = Run(qtbot, tmp_path, steady, speed=1200, interval_s=0.05)
    runs.append(r)
    qtbot.waitUntil(lambda: bool(r.seen) and r.seen[-1][0] >= 3600, timeout=40000)
    after_warmup = [(t, s) for t, s in r.seen if t >= 120]
    baseline = {a.code for a in after_warmup[0][1].alerts if a.level.rank >= AlertLevel.WARNING.rank}
    risen = {(round(t), a.code) for t, s in after_warmup for a in s.alerts
             if a.level.rank >= AlertLevel.WARNING.rank and a.code not in baseline}
    assert not risen
    assert len(after_warmup) > 10
