"""llama-swap as a backend: its documented shapes, detection (also behind an API key), and kvmon against the
simulated llama-swap — each running model read at its own upstream with the command line llama-swap started it
with, a swap seen as events, and never a request through ``/upstream/`` (which would start a stopped model)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from helpers_http import FixtureServer

from kvmon.app.group_monitor import GroupMonitor
from kvmon.core import serving
from kvmon.core.readings import SourceError
from kvmon.core.serving import ListedModel
from kvmon.sim.multi import MultiSim
from kvmon.sim.multi_scenarios import MULTI_SCENARIOS
from kvmon.sources.backends import LLAMA_SWAP
from kvmon.sources.detect import detect_backend, identify
from kvmon.sources.llama_swap.source import LlamaSwapSource, parse_listing

# internal/server/api.go: the /v1/models record and the /running entry
MODELS = {"object": "list", "data": [
    {"id": "gpt-4o-mini", "object": "model", "created": 1760000000, "owned_by": "llama-swap",
     "meta": {"llamaswap": {"type": "alias"}}, "status": {"value": "loaded"}},
    {"id": "qwen3-8b", "object": "model", "created": 1760000000, "owned_by": "llama-swap",
     "meta": {"llamaswap": {"type": "model", "port": 5801}}, "status": {"value": "loaded"}},
    {"id": "gemma-3-12b", "object": "model", "created": 1760000000, "owned_by": "llama-swap",
     "status": {"value": "unloaded"}},
]}
RUNNING = {"running": [{"model": "qwen3-8b", "state": "ready",
                        "cmd": "llama-server --port 5801 --model /models/qwen3-8b.gguf -c 16384 -ctk q8_0",
                        "proxy": "http://localhost:5801", "ttl": 300, "name": "", "description": ""}]}


def test_the_listing_from_the_documented_shapes() -> None:
    models, notes = parse_listing(MODELS, RUNNING)
    assert notes == []
    assert [(m.name, m.status) for m in models] == [("qwen3-8b", serving.LOADED), ("gemma-3-12b", serving.UNLOADED)]
    q = models[0]
    assert q.upstream_url == "http://localhost:5801" and q.args[:3] == ("llama-server", "--port", "5801")
    starting = {"running": [{**RUNNING["running"][0], "state": "starting"}]}
    assert parse_listing(MODELS, starting)[0][0].status == serving.LOADING
    stopping = {"running": [{**RUNNING["running"][0], "state": "stopping"}]}
    assert parse_listing(MODELS, stopping)[0][0].status == serving.UNLOADING
    bad = {"running": [{**RUNNING["running"][0], "cmd": "llama-server --model 'unclosed"}]}
    assert parse_listing(MODELS, bad)[1] == ["qwen3-8b: cmd not readable as a command line"]


def test_detected_by_running_and_by_its_auth_realm(fixture_server: FixtureServer) -> None:
    import json

    fixture_server.set("/running", 200, json.dumps(RUNNING))
    fixture_server.set("/api/version", 200, '{"version":"v250","commit":"0bdb372","build_date":"2026-08-22"}')
    fixture_server.set("/v1/models", 200, json.dumps(MODELS))
    assert detect_backend(fixture_server.url, None, 1.0) == LLAMA_SWAP  # not Ollama, despite /api/version
    ident = identify(fixture_server.url, None, 1.0, summary=True)
    assert (ident.version, ident.summary) == ("v250", "running: qwen3-8b")
    fixture_server.set("/running", 401, "llama-swap: unauthorized: invalid or missing API key",
                       {"WWW-Authenticate": 'Basic realm="llama-swap"', "Content-Type": "text/plain"})
    assert detect_backend(fixture_server.url, None, 1.0) == LLAMA_SWAP


def test_a_remote_llama_swap_whose_upstream_listens_on_its_loopback_is_not_read_through_upstream() -> None:
    src = LlamaSwapSource("http://192.0.2.7:8080", timeout_s=0.5)
    try:
        m = ListedModel("qwen3-8b", serving.LOADED, args=("llama-server", "--port", "5801"),
                        upstream_url="http://localhost:5801")
        with pytest.raises(SourceError) as e:
            src.model_source(m)
        assert "/upstream/" in e.value.failure.reason and "loopback" in e.value.failure.reason
        wide = ListedModel("qwen3-8b", serving.LOADED, args=("llama-server", "--host", "0.0.0.0", "--port", "5801"),
                           upstream_url="http://localhost:5801")
        assert src.upstream_for(wide) == "http://192.0.2.7:5801"
    finally:
        src.close()


@pytest.fixture
def swap() -> Iterator[MultiSim]:
    sim = MultiSim(MULTI_SCENARIOS["llama-swap"])
    sim.start()
    sim.clock.pause()
    try:
        yield sim
    finally:
        sim.stop()


def test_kvmon_follows_a_swap_and_never_starts_a_model(swap: MultiSim) -> None:
    clock = swap.clock.now
    mon = GroupMonitor(LlamaSwapSource(swap.url, timeout_s=5.0, clock=clock), None, None, clock=clock,
                       model_pids=swap.model_pids)
    snaps = []
    try:
        while swap.clock.now() < 100.0:
            swap.clock.advance(0.5)
            swap.tick()
            snaps.append(mon.poll())
    finally:
        mon.close()
    events = [(e.model, e.kind) for s in snaps if s.serving for e in s.serving.events]
    assert ("qwen3-8b", "loading") in events and ("qwen3-8b", "loaded") in events
    assert ("gemma-3-12b", "loaded") in events and ("qwen3-8b", "unloaded") in events  # one at a time: swapped
    q = [s for s in snaps if s.model.name == "qwen3-8b" and s.server_read]
    assert q and q[-1].model.n_ctx == 32768 and q[-1].provenance["n_ctx_total"] == "command_line"
    assert any(s.decode_tok_s for s in q)
    assert snaps[-1].model.name == "gemma-3-12b" and snaps[-1].serving is not None
    assert snaps[-1].serving.kind == serving.LLAMA_SWAP
    assert swap.upstream_starts == [], "kvmon started a model through /upstream/"
    # the trap is there: a request through /upstream/ starts a stopped model
    swap.clock.start()
    r = httpx.get(f"{swap.url}/upstream/gpt-oss-20b/health", timeout=20)
    assert r.status_code == 200 and swap.upstream_starts == ["gpt-oss-20b"]
    health = httpx.get(f"{swap.url}/health", timeout=5)
    assert (health.status_code, health.text) == (200, "OK")
