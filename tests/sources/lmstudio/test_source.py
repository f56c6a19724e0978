"""LM Studio: its REST lists parsed (the documentation's examples, odd entries), the proxy's meter reading its
``stats``, and the source over real HTTP against the simulated LM Studio, directly and through ``kvmon proxy``."""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from helpers_http import FixtureServer, wait_until
from repo_paths import FIXTURES

from kvmon.app.monitor import Monitor
from kvmon.core.alert_types import AlertThresholds
from kvmon.core.analysis import Analyzer
from kvmon.core.readings import FailureKind, GpuReading, GpuSetReading, SourceError
from kvmon.proxy.server import ProxyServer
from kvmon.sim.scenarios import get_scenario
from kvmon.sim.server import SimServer
from kvmon.sources.lmstudio.parse import parse_v1
from kvmon.sources.lmstudio.source import LIVE_RATE_HINT, LmStudioSource, find_gguf

FIXTURES = FIXTURES / "lmstudio"


def _json(name: str) -> object:
    return json.loads((FIXTURES / name).read_text())


# ------------------------------------------------------------------------------------------------ parsing


# ------------------------------------------------------------------------------------------------ the GGUF


def test_the_model_file_must_be_the_only_match(tmp_path: Path) -> None:
    model = parse_v1(_json("v1-models.json"))[0][0]
    folder = tmp_path / "lmstudio-community" / "gemma-4-26b-a4b-GGUF"
    folder.mkdir(parents=True)
    assert find_gguf(model, [str(tmp_path)])[0] is None
    (folder / "gemma-4-26b-a4b-Q4_K_M.gguf").write_bytes(b"")
    (folder / "mmproj-gemma-4-26b-a4b-Q4_K_M.gguf").write_bytes(b"")  # the vision projector is not the model
    (folder / "gemma-4-26b-a4b-Q8_0.gguf").write_bytes(b"")
    assert find_gguf(model, [str(tmp_path)]) == (str(folder / "gemma-4-26b-a4b-Q4_K_M.gguf"), None)
    other = tmp_path / "unsloth" / "gemma-4-26b-a4b-GGUF"
    other.mkdir(parents=True)
    (other / "gemma-4-26b-a4b-Q4_K_M.gguf").write_bytes(b"")
    path, why = find_gguf(model, [str(tmp_path)])
    assert path is None and why is not None and "2 GGUF files" in why
    assert "MLX" in (find_gguf(replace(model, format="mlx"), [str(tmp_path)])[1] or "")


# ------------------------------------------------------------------------------------------------ the source


def test_source_on_the_simulated_lmstudio() -> None:
    with SimServer("lmstudio", speed=5.0) as sim:
        src = LmStudioSource(sim.url, clock=sim.clock.now, models_dir=sim.api.models_dir)
        try:
            r = src.poll()
        finally:
            src.close()
        model = sim.engine.epoch_at(0.0).model
    assert r.backend == "lmstudio" and r.model is not None and r.model.name == "google/gemma-3-12b"
    assert r.model.shape_source == "gguf" and r.model.quantization == "Q4_K_M"
    assert r.model.weight_bytes == model.weight_bytes  # summed from the GGUF's tensor directory
    assert r.model.weight_bytes == pytest.approx(7.30e9, rel=0.005)  # gemma-3-12b-it Q4_K_M as published
    assert (r.config.n_ctx_total, r.config.flash_attn, r.config.kv_offload, r.config.n_batch) == (
        16384, "on", True, 512)
    assert r.live_rate_unavailable_reason == LIVE_RATE_HINT
    snap = Analyzer().update(r)
    assert snap.model.n_ctx == 16384 and snap.kv_allocated_bytes == model.kv_allocated_bytes
    assert "default, f16, assumed" in snap.reasons["kv_type"]


def test_before_04_only_the_v0_list() -> None:
    scenario = replace(get_scenario("lmstudio"), lmstudio_version="0.3.31")
    with SimServer(scenario) as sim:
        src = LmStudioSource(sim.url, clock=sim.clock.now, models_dir=sim.api.models_dir)
        try:
            r = src.poll()
            r2 = src.poll()
        finally:
            src.close()
    assert r.model is not None and r.model.name == "google/gemma-3-12b" and r.config.n_ctx_total is None
    assert "REST v0" in r.reasons["n_ctx_total"] and r2.config.n_ctx_total is None


def test_kv_kept_in_host_ram(fixture_server: FixtureServer, tmp_path: Path) -> None:
    from kvmon.physics.presets import preset
    from kvmon.sim.files import write_gguf_header

    body = _json("v1-models.json")
    body["models"][0]["loaded_instances"][0]["config"].update(offload_kv_cache_to_gpu=False, parallel=1)
    fixture_server.set("/api/v1/models", 200, json.dumps(body))
    src = LmStudioSource(fixture_server.url, models_dir=str(tmp_path))
    try:
        r = src.poll()
        assert r.config.kv_offload is False and "no GGUF" in r.reasons["model_shape"]
        folder = tmp_path / "lmstudio-community" / "gemma-4-26b-a4b-GGUF"
        folder.mkdir(parents=True)
        write_gguf_header(str(folder / "gemma-4-26b-a4b-Q4_K_M.gguf"), dict(preset("gemma-3-12b").metadata))
        src2 = LmStudioSource(fixture_server.url, models_dir=str(tmp_path))
        try:
            r2 = src2.poll()
        finally:
            src2.close()
    finally:
        src.close()
    gpu = GpuReading(index=0, name="NVIDIA GeForce RTX 4090", vram_total_bytes=24 * 2**30,
                     vram_used_bytes=20 * 2**30, vram_free_bytes=4 * 2**30)
    snap = Analyzer().update(r2, GpuSetReading(t_monotonic=r2.t_monotonic, gpus=(gpu,)))
    assert "host RAM" in snap.reasons["placement"] and snap.kv_allocated_bytes
    assert snap.host.kv_in_host_bytes == snap.kv_allocated_bytes
    assert [a.code for a in snap.alerts if a.code == "kv_in_host"] == ["kv_in_host"]


def test_kv_kept_in_host_ram_warns_with_its_fix() -> None:
    from kvmon.core.alert_rules import rule_kv_in_host
    from kvmon.core.alert_types import AlertFacts
    from kvmon.sources.lmstudio import LMSTUDIO

    level, msg, *_ = rule_kv_in_host(AlertFacts(t_monotonic=0.0, backend=LMSTUDIO, kv_host_fraction=1.0,
                                               kv_host_bytes=2**30), AlertThresholds(), None)
    assert level is not None and "Offload KV cache to GPU memory" in msg


def test_parallel_instances_leave_one_conversations_limit_unknown(fixture_server: FixtureServer) -> None:
    fixture_server.set("/api/v1/models", 200, (FIXTURES / "v1-models.json").read_text())
    src = LmStudioSource(fixture_server.url, models_dir=str(FIXTURES))
    try:
        r = src.poll()
    finally:
        src.close()
    assert r.config.n_parallel is None and "4 parallel predictions" in r.reasons["parallel"]
    assert Analyzer().update(r).model.n_ctx is None


@pytest.mark.parametrize(("status", "kind"), [(401, FailureKind.AUTH_REJECTED), (404, FailureKind.NOT_FOUND)])
def test_list_refused(fixture_server: FixtureServer, status: int, kind: FailureKind) -> None:
    fixture_server.set("/api/v1/models", status, '{"error":"x"}')
    fixture_server.set("/api/v0/models", status, '{"error":"x"}')
    src = LmStudioSource(fixture_server.url)
    try:
        with pytest.raises(SourceError) as e:
            src.poll()
    finally:
        src.close()
    assert e.value.failure.kind == kind


def test_live_speed_through_the_proxy() -> None:
    with SimServer("lmstudio", speed=1.0, autoplay=False) as sim:
        proxy = ProxyServer(sim.url, port=0)
        proxy.start()
        src = LmStudioSource(sim.url, proxy_url=proxy.url, models_dir=sim.api.models_dir, clock=sim.clock.now)
        mon = Monitor(src, clock=sim.clock.now)
        got: list[bytes] = []

        def client() -> None:
            conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
            conn.request("POST", "/api/v1/chat", body=json.dumps({"model": "google/gemma-3-12b", "input": "hi " * 200,
                                                                  "stream": True, "max_output_tokens": 120}))
            got.append(conn.getresponse().read())
            conn.close()

        t = threading.Thread(target=client)
        try:
            t.start()
            assert wait_until(lambda: proxy.stats()["in_flight"] and proxy.stats()["in_flight"][0]["chunks"] >= 5, 15)
            snaps = []
            for _ in range(4):
                snaps.append(mon.poll())
                time.sleep(0.3)
            live = [s for s in snaps if s.decode_tok_s is not None]
            assert live and all(s.decode_rate_source == "proxy" for s in live)
            assert 15 < live[-1].decode_tok_s < 60  # the scenario's ~33 tok/s, paced on a busy machine
            # while the first reply streams its depth is what it generated so far (its prompt counts at its end)
            assert live[-1].context_tokens and live[-1].provenance["context_tokens"] == "estimated"
            assert "first reply ends" in live[-1].reasons["context_tokens"]
            t.join(30)
            assert got and b"chat.end" in got[0]
            r = src.poll()
            assert r.last_request is not None and r.last_request.predicted_tokens == 120
            assert r.last_request.context_tokens and r.last_request.context_tokens > 120
            after = mon.poll()  # the reply's input + output tokens: the conversation's depth, measured
            assert after.context_tokens == r.last_request.context_tokens
            assert after.provenance["context_tokens"] == "measured"
        finally:
            mon.close()
            proxy.stop()


def test_demo_chats_through_the_proxy() -> None:
    from kvmon.app.demo import demo_session

    session = demo_session("lmstudio", None, speed=4.0)
    mon = session.factory()
    try:
        seen = []
        end = time.monotonic() + 30
        while time.monotonic() < end and not any(s.decode_tok_s for s in seen):
            seen.append(mon.poll())
            time.sleep(0.2)
        live = [s for s in seen if s.decode_tok_s]
        assert live and live[-1].decode_rate_source == "proxy" and live[-1].backend == "lmstudio"
        # the depth (the replies' stats) and so the ceiling are known whenever decode is: never "— ceiling"
        assert all(s.context_tokens and s.ceiling_tok_s and s.efficiency and s.efficiency <= 1.0 for s in live)
    finally:
        mon.close()
        session.close()
    assert not [t for t in threading.enumerate() if t.name == "kvmon-sim-chat" and t.is_alive()]
