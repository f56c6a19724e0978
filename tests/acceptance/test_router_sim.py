"""kvmon against the simulated router (real HTTP, simulated time stepped by the test): a model loading with progress,
per-model readings, the chat followed from one model to another, a model falling asleep while kvmon watches, a
failed load, and the events in a recording — without kvmon ever loading or waking a model."""

from __future__ import annotations

import json
from pathlib import Path

from helpers_http import wait_until

from kvmon.app.group_monitor import GroupMonitor
from kvmon.core.recorder import Recorder, read_recording
from kvmon.core.snapshot import Snapshot
from kvmon.sim.multi import MultiSim
from kvmon.sources.nvml import NvmlSource
from kvmon.sources.router.source import LlamaRouterSource


def _monitor(sim: MultiSim, recorder: Recorder | None = None) -> GroupMonitor:
    clock = sim.clock.now
    return GroupMonitor(LlamaRouterSource(sim.url, timeout_s=5.0, clock=clock), NvmlSource(nvml=sim.nvml, clock=clock),
                        None, recorder=recorder, clock=clock, model_pids=sim.model_pids)


def _run_until(sim: MultiSim, mon: GroupMonitor, t_end: float, step: float = 0.5) -> list[Snapshot]:
    out = []
    while sim.clock.now() < t_end:
        sim.clock.advance(step)
        sim.tick()
        out.append(mon.poll())
    return out


def test_the_router_story_as_kvmon_sees_it(router: MultiSim, tmp_path: Path) -> None:
    rec_path = tmp_path / "router.jsonl"
    mon = _monitor(router, Recorder(rec_path, source_url=router.url))
    try:
        first = mon.poll()
        assert first.server_read and first.serving is not None and first.serving.followed is None
        assert first.serving.message is not None and "no model loaded (4 available" in first.serving.message

        snaps = _run_until(router, mon, 3.0)  # qwen3-8b spawned at 2 s, loading for 8 s
        loading = snaps[-1]
        assert loading.connection.status.value == "loading"
        assert loading.serving is not None and loading.serving.followed == "qwen3-8b"
        # the load progress arrives on /models/sse, which kvmon follows while a model loads
        progress: list[float] = []

        def progressed() -> bool:
            router.clock.advance(0.2)
            router.tick()
            s = mon.poll()
            m = s.serving.models[0] if s.serving else None
            if m is not None and m.progress is not None:
                progress.append(m.progress)
            return len(progress) >= 2

        assert wait_until(progressed, 10.0)
        assert 0.0 < progress[-1] < 1.0 and progress == sorted(progress)
        assert "loading" in (mon.last_snapshot.serving.message or "")  # type: ignore[union-attr]

        snaps = _run_until(router, mon, 40.0)
        qwen = [s for s in snaps if s.model.name == "qwen3-8b" and s.server_read]
        assert qwen, "the loaded model is read"
        assert any(s.decode_tok_s for s in qwen), "its own decode rate, from its own slots"
        last = qwen[-1]
        assert last.model.n_ctx == 32768 and last.model.kv_type_k == "f16"  # from the router's args for it
        assert last.provenance["n_ctx_total"] == "command_line"
        assert last.kv_allocated_bytes and last.model.weight_bytes
        gpu = last.gpus[0]
        assert gpu.weights_bytes and gpu.kv_allocated_bytes  # placement: its own process on the shared GPU

        snaps += _run_until(router, mon, 130.0)
        events = [e for s in snaps if s.serving for e in s.serving.events]
        kinds = [(e.model, e.kind) for e in events]
        assert ("qwen3-8b", "loaded") in kinds and ("gemma-3-12b", "loading") in kinds
        assert ("gemma-3-12b", "followed") in kinds, kinds  # the chat moved on to gemma: kvmon followed it
        assert ("broken-model", "failed") in kinds
        assert ("qwen3-8b", "sleeping") in kinds, "kvmon's polls let the idle model fall asleep"
        gemma = [s for s in snaps if s.model.name == "gemma-3-12b" and s.server_read]
        assert gemma and gemma[-1].model.kv_type_k == "q8_0" and gemma[-1].model.n_ctx == 16384
        final = snaps[-1].serving
        assert final is not None
        by_name = {m.name: m for m in final.models}
        assert by_name["qwen3-8b"].status == "sleeping" and by_name["gpt-oss-20b"].status == "unloaded"
        assert by_name["broken-model"].status == "failed"
        assert by_name["gemma-3-12b"].followed and by_name["gemma-3-12b"].n_ctx == 16384
    finally:
        mon.close()
    assert router.autoloads == [], "a per-model request loaded a model"
    assert router.wakes == [], "kvmon woke a sleeping model"
    rec = read_recording(rec_path)
    recorded = [(e.model, e.kind) for s in rec.snapshots if s.serving for e in s.serving.events]
    assert ("qwen3-8b", "sleeping") in recorded and ("broken-model", "failed") in recorded


def test_once_on_a_router_names_its_models_and_the_one_shown(router: MultiSim) -> None:
    import contextlib
    import io

    from kvmon.cli import main as kvmon_main

    router.clock.advance(20.0)  # qwen3-8b loaded (and chatted with)
    router.tick()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = kvmon_main(["once", router.url, "--json", "--interval", "0"])
    assert rc == 0
    doc = json.loads(out.getvalue())
    sv = doc["serving"]
    assert sv["kind"] == "router" and sv["followed"] == "qwen3-8b" and doc["model"]["name"] == "qwen3-8b"
    assert [(m["name"], m["status"]) for m in sv["models"]] == [
        ("qwen3-8b", "loaded"), ("gemma-3-12b", "unloaded"), ("gpt-oss-20b", "unloaded"),
        ("broken-model", "unloaded")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert kvmon_main(["once", router.url, "--interval", "0"]) == 0
    assert "llama-server router, showing qwen3-8b" in out.getvalue().splitlines()[1]
    assert router.autoloads == []


def test_the_host_probe_runs_once_in_router_mode_and_only_while_no_model_decodes(router: MultiSim,
                                                                                tmp_path: Path) -> None:
    """The one-time host bandwidth probe is a monitor's, in router mode too: run in a poll where every running model
    was read idle, never while one loads or generates, once."""
    from kvmon.sources.host import HostSource

    clock = router.clock.now
    host = HostSource(cache_dir=tmp_path, chip_name=None, system_root=tmp_path / "none", auto_probe=True)
    mon = GroupMonitor(LlamaRouterSource(router.url, timeout_s=5.0, clock=clock), None, host, clock=clock,
                       model_pids=router.model_pids)
    busy_when_probed: list[bool] = []
    try:
        while router.clock.now() < 40.0 and mon.probes_run == 0:
            router.clock.advance(0.5)
            router.tick()
            s = mon.poll()
            if mon.probes_run:
                models = s.serving.models if s.serving else ()
                busy_when_probed.append(any(m.processing or m.status != "loaded" for m in models
                                            if m.status not in ("unloaded", "sleeping")))
        for _ in range(5):
            router.clock.advance(0.5)
            router.tick()
            s = mon.poll()
    finally:
        mon.close()
    assert mon.probes_run == 1 and busy_when_probed == [False]
    assert s.host.host_bandwidth_source == "measured" and s.host.host_bandwidth_bytes_per_s
