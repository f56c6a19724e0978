"""Depth sweeps against the simulated servers: a monitor of one, a sweep to a depth, and the simulator's own decode
speed to check each row against."""

from __future__ import annotations

import time
from typing import Any

from kvmon.app.monitor import Monitor
from kvmon.app.sweep import DepthSweep, target_for
from kvmon.core.analysis import Analyzer
from kvmon.core.sweep import plan_sweep
from kvmon.sim.scenarios import ChatScript
from kvmon.sim.server import SimServer
from kvmon.sources.backends import by_name
from kvmon.sources.detect import source_class
from kvmon.sources.nvml import NvmlSource

QUIET = ChatScript(n_turns=0, first_prompt_tokens=16, target_context_tokens=16, generated_tokens=16, think_s=1.0,
                   loop=False)


def _monitor(sim: SimServer) -> Monitor:
    clock = sim.clock.now
    backend = by_name(sim.scenario.backend)
    options: dict[str, Any] = {"timeout_s": 5.0, "clock": clock}
    if backend.name == "ollama":
        options["find_child"] = False
    server = source_class(backend)(sim.url, **options)
    return Monitor(server, NvmlSource(nvml=sim.nvml, clock=clock), sim.host_source(), Analyzer(clock=clock),
                   server_pids=sim.server_pids, clock=clock)


def _sweep(monitor: Any, to: int, steps: int = 3, generate: int = 16) -> Any:
    snap = monitor.poll()
    time.sleep(0.1)
    snap = monitor.poll()
    plan = plan_sweep(snap, by_name(str(snap.backend)), to, steps, generate)
    assert plan.refusal is None, plan.refusal
    result = DepthSweep(target_for(monitor, snap), plan, snap).run()
    assert result.outcome == "done", result.reason
    assert [r.depth_tokens for r in result.rows][-1] >= to - 8
    return result


def _physics(sim: SimServer, depth: float) -> float:
    """The simulated server's own decode speed at ``depth`` (its model, noise aside)."""
    model = sim.engine.epoch_at(sim.clock.now()).model
    return float(model.decode_tok_s(depth))
