"""A swept configuration replayed slower: the atlas's measured curve is what "slower than earlier at this depth"
compares against, with its share of the gap, and the headline names it."""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from kvmon.app.atlas import Atlas, SessionCurves
from kvmon.app.monitor import Monitor
from kvmon.app.sweep import DepthSweep, target_for
from kvmon.core.analysis import Analyzer
from kvmon.core.analysis.causes import DEPTH_NEAR, NEAR_TOKENS
from kvmon.core.sweep import plan_sweep
from kvmon.sim.scenarios import ChatScript, get_scenario
from kvmon.sim.server import SimServer
from kvmon.sources.backends import by_name
from kvmon.sources.llamacpp.source import LlamaServerSource
from kvmon.sources.nvml import NvmlSource

QUIET = ChatScript(n_turns=0, first_prompt_tokens=16, target_context_tokens=16, generated_tokens=16, think_s=1.0,
                   loop=False)
SCENARIO = replace(get_scenario("agent-cache-miss"), agent=False, script=QUIET)
SLOWER = 0.7  # the replay decodes at 70% of the swept speed: the server got slower with uptime


def _monitor(sim: SimServer, curves: SessionCurves) -> Monitor:
    clock = sim.clock.now
    server = LlamaServerSource(sim.url, timeout_s=5.0, clock=clock)
    return Monitor(server, NvmlSource(nvml=sim.nvml, clock=clock), sim.host_source(),
                   Analyzer(clock=clock, curve_memory=curves), server_pids=sim.server_pids, clock=clock)


def test_a_slower_replay_of_a_swept_configuration_is_slower_than_its_measured_curve(tmp_path: Path) -> None:
    atlas = Atlas(tmp_path / "atlas.sqlite")
    with SimServer(SCENARIO, speed=20.0, autoplay=False) as sim:  # the sweep, dated an hour ago
        curves = SessionCurves(atlas)
        monitor = _monitor(sim, curves)
        monitor.poll()
        time.sleep(0.1)
        snap = monitor.poll()
        plan = plan_sweep(snap, by_name("llama-server"), 8192, 16, 16)
        assert plan.refusal is None, plan.refusal
        result = DepthSweep(target_for(monitor, snap), plan, snap, wall=lambda: time.time() - 3600.0).run()
        assert result.outcome == "done", result.reason
        curves.add_sweep(result)
        monitor.close()
    swept = [(r.depth_tokens, r.decode_tok_s) for r in result.rows if r.decode_tok_s]
    assert len(swept) >= 12

    slow = replace(SCENARIO, decode_anchors=tuple((d, v * SLOWER) for d, v in SCENARIO.decode_anchors))
    with SimServer(slow, speed=20.0, autoplay=False) as sim:  # the same setup now, slower
        monitor = _monitor(sim, SessionCurves(atlas))
        body = {"prompt": "word" * 4000, "n_predict": 1500, "stream": False}
        talk = threading.Thread(target=lambda: httpx.post(f"{sim.url}/completion", json=body, timeout=60),
                                daemon=True)
        talk.start()
        snaps = []
        while talk.is_alive():
            snaps.append(monitor.poll())
            time.sleep(0.05)
        monitor.close()
    named = [s for s in snaps if any(c.code == "slower_than_before" for c in s.slowdown_causes)]
    assert named, "a slower replay of the swept configuration was never said to be slower than its curve"
    s = named[-1]
    assert s.atlas is not None and s.atlas.config == result.config
    (cause,) = [c for c in s.slowdown_causes if c.code == "slower_than_before"]
    depth = s.context_tokens
    assert depth is not None and s.decode_tok_s is not None and s.ceiling_tok_s is not None
    span = max(NEAR_TOKENS, DEPTH_NEAR * depth)
    before = statistics.median(v for d, v in swept if abs(d - depth) <= span)
    assert s.decode_tok_s == pytest.approx(SLOWER * before, rel=0.08)
    # its share: the time per token it adds over the gap to the ceiling
    share = (1 / s.decode_tok_s - 1 / before) / (1 / s.decode_tok_s - 1 / s.ceiling_tok_s)
    assert cause.share == pytest.approx(share, rel=1e-6)
    assert cause.summary.startswith("slower than earlier at this depth")
    assert "the newest ≈ 1 h ago" in cause.message and "restarting it restores the speed" in cause.message
    assert s.verdict is not None and s.verdict.cause == s.slowdown_causes[0].code == "slower_than_before"
