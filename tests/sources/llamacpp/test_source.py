"""LlamaServerSource against the real llama-server captures served over HTTP on 127.0.0.1."""

from __future__ import annotations

import json

import pytest
from helpers_http import LLAMA_FIXTURES, FixtureServer, serve_llama_state

from kvmon.core.readings import FailureKind, ServerConfig, SourceError
from kvmon.sources.base import ServerSource
from kvmon.sources.llamacpp.parse import parse_metrics, parse_slot
from kvmon.sources.llamacpp.source import LlamaServerSource


def _source(server: FixtureServer, **kw: object) -> LlamaServerSource:
    kw.setdefault("inspect_local_process", False)
    return LlamaServerSource(server.url, timeout_s=1.0, **kw)  # type: ignore[arg-type]


def test_is_a_server_source(fixture_server: FixtureServer) -> None:
    src = _source(fixture_server)
    assert isinstance(src, ServerSource)
    assert src.backend == "llama-server"
    assert src.display_url == fixture_server.url
    src.close()


def test_generating_capture(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "generating")
    r = _source(fixture_server).poll()
    assert r.backend == "llama-server"
    assert r.server_version == "b11549-unknown"
    assert r.state == "ok"
    assert r.total_slots == 1
    assert len(r.slots) == 1
    s = r.slots[0]
    assert (s.id, s.n_ctx, s.context_tokens, s.processing) == (0, 16384, 1066, True)
    assert (s.n_decoded, s.n_remain, s.id_task) == (1037, 2963, 2)
    assert s.n_prompt_tokens_processed == 29 and s.n_prompt_tokens_cache == 0
    assert r.model is not None
    assert r.model.name == "tiny-llama-e256-l4.gguf"
    assert r.model.n_params == 2666752
    assert r.model.weight_bytes == 5338112
    assert r.model.n_ctx_train == 32768 and r.model.n_embd == 256
    assert r.model.quantization == "F16"
    assert r.metrics_enabled is True
    assert r.metrics["n_decode_total"] == 1029
    assert r.metrics["prompt_tokens_total"] == 29
    assert r.metrics["n_tokens_max"] == 1057
    # counters only: the reset-on-scrape gauges are never kept
    for gauge in ("prompt_tokens_seconds", "predicted_tokens_seconds", "requests_processing", "requests_deferred"):
        assert gauge not in r.metrics
    assert r.live_rate_source == "slots"
    # no argv/log: one slot means the unified question does not matter; total = per-slot context
    assert r.kv_unified is False
    assert r.config.n_ctx_total == 16384
    assert r.config.n_ctx_per_slot == 16384
    assert r.config.provenance["n_ctx_total"] == "computed"
    assert r.config.type_k == "f16" and r.config.provenance["type_k"] == "default"
    assert "model.shape" in r.reasons  # the GGUF file is not on this machine


def test_idle_capture(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    r = _source(fixture_server).poll()
    assert r.slots[0].processing is False
    assert r.slots[0].n_decoded is None
    assert r.slots[0].context_tokens is None


@pytest.mark.parametrize("state", ["idle-after", "generating-later", "generating-with-deferred", "after-long-stream"])
def test_other_main_run_states(fixture_server: FixtureServer, state: str) -> None:
    serve_llama_state(fixture_server, state)
    fixture_server.set_capture("/props", "props.idle.json")
    if (LLAMA_FIXTURES / f"slots.{state}.json").exists():
        fixture_server.set_capture("/slots", f"slots.{state}.json")
    r = _source(fixture_server).poll()
    raw = json.loads((LLAMA_FIXTURES / f"slots.{state}.json").read_text())
    assert [s.id for s in r.slots] == [s["id"] for s in raw]
    assert r.slots[0].context_tokens == raw[0].get("n_prompt_tokens")
    assert r.slots[0].processing == raw[0]["is_processing"]


def test_after_chat_counters(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    fixture_server.set_capture("/metrics", "metrics.after-chat.txt")
    fixture_server.set_capture("/slots", "slots.after-chat.json")
    r = _source(fixture_server).poll()
    text = (LLAMA_FIXTURES / "metrics.after-chat.txt").read_text()
    line = next(x for x in text.splitlines() if x.startswith("llamacpp:tokens_predicted_total "))
    assert r.metrics["tokens_predicted_total"] == float(line.split()[1])


def test_loading_is_a_typed_failure(fixture_server: FixtureServer) -> None:
    for path in ("/health", "/props", "/slots", "/metrics", "/v1/models"):
        fixture_server.set_capture(path, "health.loading.json")
    with pytest.raises(SourceError) as e:
        _source(fixture_server).poll()
    assert e.value.failure.kind == FailureKind.MODEL_LOADING


def test_older_health_loading_status(fixture_server: FixtureServer) -> None:
    fixture_server.set("/health", 503, '{"status": "loading model"}')
    with pytest.raises(SourceError) as e:
        _source(fixture_server).poll()
    assert e.value.failure.kind == FailureKind.MODEL_LOADING


def test_older_health_no_slot_is_not_a_failure(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "generating")
    fixture_server.set("/health", 503, '{"status": "no slot available", "slots_idle": 0, "slots_processing": 1}')
    assert _source(fixture_server).poll().slots[0].processing


def test_flags_off_metrics_not_read(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    fixture_server.set_capture("/props", "flags-off/props.default-flags.json")
    fixture_server.set_capture("/slots", "flags-off/slots.default-flags.json")
    fixture_server.set_capture("/metrics", "flags-off/metrics.no-metrics-flag.txt")
    r = _source(fixture_server).poll()
    assert r.metrics_enabled is False and r.metrics == {}
    assert "/metrics" not in fixture_server.paths_requested()
    assert "--metrics" in r.reasons["metrics"]


def test_no_slots_flag(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    fixture_server.set_capture("/props", "flags-off/props.no-slots-flag.json")
    fixture_server.set_capture("/slots", "flags-off/slots.no-slots-flag.json")
    fixture_server.set_capture("/metrics", "flags-off/metrics.no-metrics-flag.txt")
    r = _source(fixture_server).poll()
    assert r.slots == ()
    assert r.live_rate_source is None
    assert r.live_rate_unavailable_reason


def test_slots_501_without_props_flag(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    fixture_server.set_capture("/slots", "flags-off/slots.no-slots-flag.json")
    r = _source(fixture_server).poll()
    assert r.slots == ()
    assert "disabled" in r.reasons["slots"]
    assert r.live_rate_source == "metrics"  # n_decode_total stands in


def test_old_build_without_flags_tries_metrics_once(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    props = json.loads((LLAMA_FIXTURES / "props.idle.json").read_text())
    for k in ("endpoint_slots", "endpoint_props", "endpoint_metrics", "is_sleeping"):
        props.pop(k)
    fixture_server.set("/props", 200, json.dumps(props))
    fixture_server.set_capture("/metrics", "flags-off/metrics.no-metrics-flag.txt")
    src = _source(fixture_server)
    r1 = src.poll()
    r2 = src.poll()
    assert r1.metrics_enabled is False and r2.metrics_enabled is False
    assert fixture_server.paths_requested().count("/metrics") == 1


def test_sleeping_server_slots_not_polled(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    props = json.loads((LLAMA_FIXTURES / "props.idle.json").read_text())
    props["is_sleeping"] = True
    fixture_server.set("/props", 200, json.dumps(props))
    r = _source(fixture_server).poll()
    assert r.state == "sleeping"
    assert "/slots" not in fixture_server.paths_requested()
    assert "sleeping" in (r.live_rate_unavailable_reason or "")


def test_unified_default_slots(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    fixture_server.set_capture("/props", "slots-np/props.idle.defaults.json")
    fixture_server.set_capture("/slots", "slots-np/slots.idle.defaults.json")
    fixture_server.set_capture("/v1/models", "slots-np/v1-models.idle.defaults.json")
    # the log says unified: the total is the pool every slot reports, not 4 × 32768
    log_cfg = ServerConfig(kv_unified=True)
    r = _source(fixture_server, config_override=log_cfg).poll()
    assert r.total_slots == 4 and len(r.slots) == 4
    assert all(s.n_ctx == 32768 for s in r.slots)
    assert r.kv_unified is True
    assert r.config.n_ctx_total == 32768
    assert r.config.provenance["kv_unified"] == "user"


def test_np2_slots_add_up(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    fixture_server.set_capture("/props", "slots-np/props.idle.np2.json")
    fixture_server.set_capture("/slots", "slots-np/slots.after.np2.json")
    fixture_server.set_capture("/v1/models", "slots-np/v1-models.idle.np2.json")
    r = _source(fixture_server, config_override=ServerConfig(kv_unified=False)).poll()
    assert r.total_slots == 2
    assert r.config.n_ctx_total == 16384
    assert r.slots[1].context_tokens == 20


def test_unified_unknown_without_argv(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    fixture_server.set_capture("/props", "slots-np/props.idle.defaults.json")
    fixture_server.set_capture("/slots", "slots-np/slots.idle.defaults.json")
    r = _source(fixture_server).poll()
    assert r.kv_unified is None
    assert r.config.n_ctx_total is None  # not 4 × 32768, not guessed


@pytest.mark.parametrize(
    "props_file",
    [
        "kv-q8-fa/props.idle.q8kv-fa.json",
        "kv-q8-fa/props.idle.fa-off.json",
        "kv-q8-fa/props.idle.q8kv-fa-auto.json",
        "kv-q8-fa/props.idle.f16-lv4.json",
        "speed-sweep/props.idle.big.json",
        "api-key/props.apikey.x-api-key-header.json",
    ],
)
def test_every_props_variant_parses(fixture_server: FixtureServer, props_file: str) -> None:
    serve_llama_state(fixture_server, "idle")
    fixture_server.set_capture("/props", props_file)
    r = _source(fixture_server).poll()
    assert r.server_version == "b11549-unknown"
    assert r.config.n_ctx_per_slot in (16384, 32768)


def test_q8_capture_set_with_log(fixture_server: FixtureServer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    serve_llama_state(fixture_server, "idle")
    fixture_server.set_capture("/props", "kv-q8-fa/props.idle.q8kv-fa.json")
    fixture_server.set_capture("/slots", "kv-q8-fa/slots.after.q8kv-fa.json")
    fixture_server.set_capture("/metrics", "kv-q8-fa/metrics.idle.q8kv-fa.txt")
    fixture_server.set_capture("/v1/models", "kv-q8-fa/v1-models.q8kv-fa.json")
    text = (LLAMA_FIXTURES / "kv-log-lines.txt").read_text()
    block = text.split("\n## ")[3]  # the -ctk q8_0 -ctv q8_0 -fa on run
    log = tmp_path / "server.log"
    log.write_text(block)
    r = _source(fixture_server, log_path=str(log)).poll()
    assert (r.config.type_k, r.config.type_v, r.config.flash_attn) == ("q8_0", "q8_0", "on")
    assert r.config.kv_bytes_allocated == 17 * 1024 * 1024
    assert r.config.provenance["type_k"] == "log"
    assert r.slots[0].processing is False


def test_speed_sweep_mid_request(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    fixture_server.set_capture("/props", "speed-sweep/props.idle.big.json")
    fixture_server.set_capture("/v1/models", "speed-sweep/v1-models.idle.big.json")
    for ctx in (8, 1024, 2048, 4096, 8192, 16384):
        fixture_server.set_capture("/slots", f"speed-sweep/sweep-f16-101/slots.mid-request.ctx{ctx}.json")
        fixture_server.set_capture("/metrics", f"speed-sweep/sweep-f16-101/metrics.mid-request.ctx{ctx}.txt")
        r = _source(fixture_server).poll()
        raw = json.loads((LLAMA_FIXTURES / f"speed-sweep/sweep-f16-101/slots.mid-request.ctx{ctx}.json").read_text())
        assert r.slots[0].processing is raw[0]["is_processing"]
        assert r.slots[0].context_tokens == raw[0]["n_prompt_tokens"]
        assert r.slots[0].n_ctx == 32768
        assert r.model is not None and r.model.n_params is not None and r.model.n_params > 70_000_000
        assert "n_decode_total" in r.metrics


def test_older_slot_shapes() -> None:
    reasons: dict[str, str] = {}
    old = {"id": 0, "id_task": 5, "n_ctx": 4096, "state": 1, "n_past": 300,
           "next_token": {"has_next_token": True, "n_remain": -1, "n_decoded": 120, "stopping_word": ""}}
    s = parse_slot(old, reasons)
    assert s is not None
    assert (s.processing, s.context_tokens, s.n_decoded, s.n_remain) == (True, 300, 120, -1)
    idle = {"id": 1, "id_task": -1, "n_ctx": 4096, "state": 0, "next_token": {"n_decoded": 0, "n_remain": 0}}
    s2 = parse_slot(idle, reasons)
    assert s2 is not None and s2.processing is False and s2.context_tokens is None
    assert "slot1.context_tokens" in reasons  # the build does not say how many tokens the slot holds


def test_wrong_field_types_in_slot() -> None:
    reasons: dict[str, str] = {}
    s = parse_slot({"id": 0, "n_ctx": "big", "is_processing": "yes", "n_prompt_tokens": [1],
                    "n_prompt_tokens_processed": 1, "next_token": [{"n_decoded": "7"}]}, reasons)
    assert s is not None
    assert s.n_ctx is None and s.context_tokens is None and s.n_decoded is None
    assert s.processing is False and "slot0.processing" in reasons
    assert parse_slot({"id": True}, reasons) is None
    assert parse_slot(["not", "an", "object"], reasons) is None


def test_parse_metrics_counters_only() -> None:
    text = (LLAMA_FIXTURES / "metrics.generating-with-deferred.txt").read_text()
    m = parse_metrics(text)
    assert "requests_deferred" not in m and "n_busy_slots_per_decode" not in m
    assert set(m) >= {"prompt_tokens_total", "tokens_predicted_total", "n_decode_total", "n_tokens_max"}
    assert all(not k.startswith("llamacpp:") for k in m)


# ---- bad input ---------------------------------------------------------------------------------

def test_truncated_props_is_partial(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "generating")
    body = (LLAMA_FIXTURES / "props.generating.json").read_bytes()
    fixture_server.set("/props", 200, body[: len(body) // 2])
    r = _source(fixture_server).poll()
    assert "did not return JSON" in r.reasons["props"]
    assert r.slots[0].n_decoded == 1037  # the rest still read


def test_html_error_page_on_slots(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "generating")
    page = "<!DOCTYPE html><html><body>Bad Gateway</body></html>"
    fixture_server.set("/slots", 502, page, {"Content-Type": "text/html"})
    r = _source(fixture_server).poll()
    assert r.slots == ()
    assert "502" in r.reasons["slots"]


def test_non_json_slots_200(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "generating")
    fixture_server.set("/slots", 200, "<html>proxy login</html>", {"Content-Type": "text/html"})
    r = _source(fixture_server).poll()
    assert "HTML page" in r.reasons["slots"]


def test_slots_wrong_type(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "generating")
    fixture_server.set("/slots", 200, '{"slots": []}')
    r = _source(fixture_server).poll()
    assert r.slots == () and "list" in r.reasons["slots"]


def test_props_wrong_types(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    fixture_server.set("/props", 200, json.dumps({"total_slots": "one", "model_path": 7, "build_info": None,
                                                   "default_generation_settings": [], "is_sleeping": "no"}))
    r = _source(fixture_server).poll()
    assert r.total_slots == 1  # from /slots
    assert r.server_version is None
    fixture_server.set("/props", 200, "[1, 2]")
    r = _source(fixture_server).poll()
    assert "object" in r.reasons["props"]


def test_props_404_and_models_missing(fixture_server: FixtureServer) -> None:
    fixture_server.set_capture("/health", "health.idle.json")
    fixture_server.set_capture("/slots", "slots.idle.json")
    r = _source(fixture_server).poll()
    assert "404" in r.reasons["props"]
    assert "v1_models" in r.reasons
    assert r.model is not None and r.model.n_params is None


def test_garbage_metrics(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "generating")
    fixture_server.set("/metrics", 200, "llamacpp:n_decode_total not-a-number\n{{{", {"Content-Type": "text/plain"})
    r = _source(fixture_server).poll()
    assert r.metrics == {}
    assert "not understood" in r.reasons["metrics"]


def test_metrics_503(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "generating")
    fixture_server.set("/metrics", 503, '{"error":{"message":"busy","code":503}}')
    r = _source(fixture_server).poll()
    assert r.metrics == {} and "503" in r.reasons["metrics"]


def test_huge_body_is_capped(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "generating")
    fixture_server.set("/v1/models", 200, b"[" + b" " * (50 * 1024 * 1024) + b"]")
    r = _source(fixture_server).poll()
    assert "larger than" in r.reasons["v1_models"]
    assert r.slots[0].n_decoded == 1037


def test_server_that_never_answers(fixture_server: FixtureServer) -> None:
    fixture_server.hang("/health", 5.0)
    src = LlamaServerSource(fixture_server.url, timeout_s=0.3, inspect_local_process=False)
    with pytest.raises(SourceError) as e:
        src.poll()
    assert e.value.failure.kind == FailureKind.TIMEOUT


def test_slow_slots_times_out_partially(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "generating")
    fixture_server.hang("/slots", 5.0)
    src = LlamaServerSource(fixture_server.url, timeout_s=0.3, inspect_local_process=False)
    r = src.poll()
    assert r.slots == () and "did not answer" in r.reasons["slots"]


def test_dropped_connection(fixture_server: FixtureServer) -> None:
    fixture_server.drop("/health")
    with pytest.raises(SourceError) as e:
        _source(fixture_server).poll()
    assert e.value.failure.kind == FailureKind.UNREACHABLE


def test_connection_refused() -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(SourceError) as e:
        LlamaServerSource(f"http://127.0.0.1:{port}", timeout_s=0.5, inspect_local_process=False).poll()
    assert e.value.failure.kind == FailureKind.UNREACHABLE


@pytest.mark.parametrize("url", ["", "ftp://host/", "http://", "http://host:notaport/"])
def test_bad_urls(url: str) -> None:
    with pytest.raises(SourceError) as e:
        LlamaServerSource(url)
    assert e.value.failure.kind == FailureKind.BAD_URL


def test_health_error_state(fixture_server: FixtureServer) -> None:
    fixture_server.set("/health", 500, '{"status": "error"}')
    with pytest.raises(SourceError) as e:
        _source(fixture_server).poll()
    assert e.value.failure.kind == FailureKind.SERVER_ERROR


def test_older_v1_models_without_n_ctx_or_ftype(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    body = json.loads((LLAMA_FIXTURES / "v1-models.idle.json").read_text())
    for k in ("n_ctx", "ftype"):
        body["data"][0]["meta"].pop(k)
    body.pop("models")
    fixture_server.set("/v1/models", 200, json.dumps(body))
    props = json.loads((LLAMA_FIXTURES / "props.idle.json").read_text())
    props.pop("model_ftype")
    fixture_server.set("/props", 200, json.dumps(props))
    r = _source(fixture_server).poll()
    assert r.model is not None
    assert r.model.quantization is None and r.model.n_params == 2666752
    assert r.config.n_ctx_per_slot == 16384  # from /props


def test_v1_models_read_once_per_model(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    src = _source(fixture_server)
    src.poll()
    src.poll()
    assert fixture_server.paths_requested().count("/v1/models") == 1


def test_local_process_that_is_not_llama_server(fixture_server: FixtureServer) -> None:
    # the canned server runs inside this python test process: found, but its argv is not used
    serve_llama_state(fixture_server, "idle")
    r = LlamaServerSource(fixture_server.url, timeout_s=1.0).poll()
    assert "does not look like llama-server" in r.reasons["config.process"]
    assert r.server_pids == ()
    assert r.config.provenance["type_k"] == "default"


def _router_models(loaded: bool) -> str:
    return json.dumps({"object": "list", "data": [
        {"id": "other.gguf", "status": {"value": "unloaded"}},
        {"id": "tiny-llama-e256-l4.gguf", "status": {"value": "loaded" if loaded else "unloaded"},
         "meta": {"n_params": 2666752, "size": 5338112, "n_ctx_train": 32768, "n_embd": 256}},
    ]})


def test_router_mode_uses_the_loaded_model(fixture_server: FixtureServer) -> None:
    fixture_server.set_capture("/health", "health.idle.json")
    fixture_server.set("/props", 400, '{"error":{"message":"model name is missing from the request","code":400}}')
    fixture_server.set("/v1/models", 200, _router_models(True))
    fixture_server.set_capture("/props?model=tiny-llama-e256-l4.gguf", "props.generating.json")
    fixture_server.set_capture("/slots?model=tiny-llama-e256-l4.gguf", "slots.generating.json")
    fixture_server.set_capture("/metrics?model=tiny-llama-e256-l4.gguf", "metrics.generating.txt")
    r = _source(fixture_server).poll()
    assert "props" not in r.reasons
    assert r.slots[0].n_decoded == 1037 and r.metrics["n_decode_total"] == 1029
    assert r.model is not None and r.model.n_params == 2666752


def test_router_mode_nothing_loaded(fixture_server: FixtureServer) -> None:
    fixture_server.set_capture("/health", "health.idle.json")
    fixture_server.set("/props", 400, '{"error":{"message":"model name is missing","code":400}}')
    fixture_server.set("/v1/models", 200, _router_models(False))
    r = _source(fixture_server).poll()
    assert r.state == "idle" and r.slots == () and "no model is loaded" in r.reasons["model"]


def test_health_is_asked_on_the_first_poll_and_then_only_now_and_then(fixture_server: FixtureServer) -> None:
    """/props answers what /health would (loading, key, gone): one request less on most polls."""
    from kvmon.sources.llamacpp.source import HEALTH_EVERY_POLLS

    serve_llama_state(fixture_server, "idle")
    src = LlamaServerSource(fixture_server.url, timeout_s=2.0, inspect_local_process=False)
    try:
        for _ in range(HEALTH_EVERY_POLLS + 1):
            src.poll()
    finally:
        src.close()
    health = [p for _m, p, _h in fixture_server.requests if p.split("?")[0] == "/health"]
    assert len(health) == 2, health  # the first poll and the tenth after it


def test_server_gone_between_health_checks_is_a_typed_failure(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    src = LlamaServerSource(fixture_server.url, timeout_s=0.5, inspect_local_process=False)
    try:
        src.poll()  # healthy: the next poll skips /health (and /props: /slots just answered)
        for path in ("/props", "/slots", "/metrics", "/v1/models"):  # the server hangs
            fixture_server.hang(path, 3.0)
        with pytest.raises(SourceError) as e:
            src.poll()
    finally:
        src.close()
    assert e.value.failure.kind is FailureKind.TIMEOUT  # a failure, not a reading of nothing


def _count(server: FixtureServer, path: str) -> int:
    return sum(1 for _m, p, _h in server.requests if p.split("?")[0] == path)


def test_props_is_reused_while_a_slot_generates_or_slots_was_just_asked(fixture_server: FixtureServer) -> None:
    """A generating server is awake with its model fixed: /props is read again with /health, every tenth poll.
    Idle, a server that may sleep is asked /props before /slots unless /slots answered under 2 s ago (/slots is a
    task on its queue: it restarted the idle timer that --sleep-idle-seconds counts)."""
    from kvmon.sources.llamacpp.source import HEALTH_EVERY_POLLS, REUSE_MAX_POLLS, SLOTS_KEEP_AWAKE_S

    assert HEALTH_EVERY_POLLS <= REUSE_MAX_POLLS + 1
    now = [1000.0]
    serve_llama_state(fixture_server, "generating")
    src = LlamaServerSource(fixture_server.url, timeout_s=2.0, inspect_local_process=False, clock=lambda: now[0])
    try:
        first = src.poll()
        for _ in range(HEALTH_EVERY_POLLS - 1):
            now[0] += 1.0
            r = src.poll()
            assert r.model.name == first.model.name and r.server_version == first.server_version
            assert r.config == first.config and r.total_slots == first.total_slots
        assert _count(fixture_server, "/props") == 1, "reused while generating"
        now[0] += 1.0
        src.poll()  # with /health: read again
        assert _count(fixture_server, "/props") == 2 and _count(fixture_server, "/health") == 2
        serve_llama_state(fixture_server, "idle")
        before = _count(fixture_server, "/props")
        for _ in range(3):  # idle, polled each second: /slots a second ago kept it awake
            now[0] += 1.0
            assert src.poll().state == "ok"
        assert _count(fixture_server, "/props") == before
        now[0] += SLOTS_KEEP_AWAKE_S + 8.0  # a longer gap (a hidden window polls every 10 s): it may be asleep
        src.poll()
        assert _count(fixture_server, "/props") == before + 1
        order = [p for _m, p, _h in fixture_server.requests if p in ("/props", "/slots")]
        assert order[-2:] == ["/props", "/slots"], "asked whether it sleeps before /slots could wake it"
    finally:
        src.close()


@pytest.mark.parametrize(("sleep_s", "gap_s", "props_reads"),
                         [(-1, 3.0, 1), (None, 3.0, 4), (300, 1.0, 1), (None, 1.0, 1)])
def test_an_idle_server_is_asked_for_props_only_when_it_may_have_fallen_asleep(
        fixture_server: FixtureServer, sleep_s: int | None, gap_s: float, props_reads: int) -> None:
    """/props goes before /slots while a server could be asleep: not when its command line says it never sleeps
    (llama-server's default), nor within 2 s of the last /slots; otherwise (may sleep, or unknown) every poll.
    (A server known to sleep, idle for longer, is not asked /slots at all: the next test.)"""
    serve_llama_state(fixture_server, "idle")
    override = ServerConfig(sleep_idle_seconds=sleep_s) if sleep_s is not None else None
    now = [50.0]
    src = LlamaServerSource(fixture_server.url, timeout_s=2.0, inspect_local_process=False, config_override=override,
                            clock=lambda: now[0])
    try:
        for _ in range(4):
            r = src.poll()
            assert r.state == "ok" and r.slots
            now[0] += gap_s
        assert _count(fixture_server, "/props") == props_reads
        assert _count(fixture_server, "/slots") == 4
    finally:
        src.close()


def test_metrics_are_read_again_only_when_a_slot_starts_ends_or_begins_decoding(fixture_server: FixtureServer) -> None:
    """Idle slots with the same task and counts, or the same task decoding on: /metrics is not asked again."""
    serve_llama_state(fixture_server, "idle")
    src = LlamaServerSource(fixture_server.url, timeout_s=2.0, inspect_local_process=False)
    try:
        first = src.poll()
        assert first.metrics_enabled is True and first.metrics
        for _ in range(3):
            r = src.poll()
            assert r.metrics == first.metrics and r.metrics_enabled is True
        assert _count(fixture_server, "/metrics") == 1
        # a request ran and finished between two polls: the slot shows another task, the counters are read
        serve_llama_state(fixture_server, "idle-after")
        after = src.poll()
        assert _count(fixture_server, "/metrics") == 2
        assert after.metrics != first.metrics
        serve_llama_state(fixture_server, "generating")
        gen = src.poll()  # a task started: read
        assert _count(fixture_server, "/metrics") == 3 and gen.metrics["prompt_tokens_total"] == 29
        serve_llama_state(fixture_server, "generating-later")
        src.poll()  # the same task still decoding: the prompt and request counters cannot have moved
        assert _count(fixture_server, "/metrics") == 3
    finally:
        src.close()


def test_a_failed_poll_forgets_the_reused_answers(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "generating")
    src = LlamaServerSource(fixture_server.url, timeout_s=0.5, inspect_local_process=False)
    try:
        src.poll()
        for path in ("/slots", "/metrics"):  # the server hangs (/props is not asked: its last answer stands)
            fixture_server.hang(path, 2.0)
        with pytest.raises(SourceError):
            src.poll()
        serve_llama_state(fixture_server, "generating")
        for path in ("/slots", "/metrics"):
            fixture_server.routes[path].hang_s = 0.0
        props_before = _count(fixture_server, "/props")
        src.poll()
        assert _count(fixture_server, "/props") == props_before + 1
    finally:
        src.close()


def test_metrics_key_marks_every_moment_a_counter_kvmon_reads_can_move() -> None:
    from kvmon.core.readings import SlotReading
    from kvmon.sources.llamacpp.parse import metrics_key as _metrics_key

    def slot(task: int | None, busy: bool, decoded: int | None, held: int | None = 10) -> SlotReading:
        return SlotReading(id=0, n_ctx=4096, context_tokens=held, processing=busy, n_decoded=decoded, id_task=task)

    assert _metrics_key("", ()) is None  # no /slots: n_decode_total stands in, read every poll
    prefill, decoding, later = slot(7, True, 0), slot(7, True, 5), slot(7, True, 900, 950)
    assert _metrics_key("", (prefill,)) != _metrics_key("", (decoding,))  # the prompt was processed
    assert _metrics_key("", (decoding,)) == _metrics_key("", (later,))  # decoding on: nothing counted yet
    assert _metrics_key("", (later,)) != _metrics_key("", (slot(7, False, 900, 950),))  # the request ended
    assert _metrics_key("", (slot(7, False, 900),)) != _metrics_key("", (slot(8, False, 3),))  # came and went
    assert _metrics_key("", (later,)) != _metrics_key("?model=a", (later,))


@pytest.mark.parametrize(("server_name", "model_path", "general_name", "shown"), [
    ("/home/me/models/Qwen3-8B-Q4_K_M.gguf", "/home/me/models/Qwen3-8B-Q4_K_M.gguf", "Qwen3 8B", "Qwen3 8B"),
    ("/home/me/models/Qwen3-8B-Q4_K_M.gguf", "/home/me/models/Qwen3-8B-Q4_K_M.gguf", None, "Qwen3-8B-Q4_K_M.gguf"),
    ("Qwen3-8B-Q4_K_M.gguf", "Qwen3-8B-Q4_K_M.gguf", None, "Qwen3-8B-Q4_K_M.gguf"),  # -m relative, no alias
    ("coder", "/models/x.gguf", "Qwen3 8B", "coder"),  # an alias the user chose stays
    ("meta-llama/Llama-3.1-8B", "/models/x.gguf", None, "meta-llama/Llama-3.1-8B"),  # a slash is not a path
    ("<b>BOLD</b>", "/models/x.gguf", None, "<b>BOLD</b>"),
    (None, "C:\\models\\x.gguf", None, "x.gguf"),
    ("/srv/m/y.gguf", None, "  ", "y.gguf"),
    (None, None, None, None),
])
def test_the_model_is_named_for_people_never_by_a_path(server_name: str | None, model_path: str | None,
                                                        general_name: str | None, shown: str | None) -> None:
    from kvmon.sources.model_file import display_name

    assert display_name(server_name, model_path, general_name) == shown


@pytest.mark.parametrize("metrics", [True, False])
def test_an_idle_server_that_sleeps_when_idle_is_let_fall_asleep(fixture_server: FixtureServer,
                                                                 metrics: bool) -> None:
    """Every /slots request restarts the idle timer of --sleep-idle-seconds: after a few idle seconds kvmon stops
    asking it, watching /metrics (no timer reset) for a request, or, without /metrics, looking again once the
    server should have fallen asleep. The slots read last stand while /metrics shows nothing moved."""
    from kvmon.sources.llamacpp.sleep import QUIET_AFTER_S

    serve_llama_state(fixture_server, "idle")
    if not metrics:
        fixture_server.set_capture("/props", "flags-off/props.default-flags.json")  # endpoint_metrics false
        fixture_server.set_capture("/metrics", "flags-off/metrics.no-metrics-flag.txt")
    now = [100.0]
    src = LlamaServerSource(fixture_server.url, timeout_s=2.0, inspect_local_process=False,
                            config_override=ServerConfig(sleep_idle_seconds=60), clock=lambda: now[0])
    try:
        readings = []
        for _ in range(12):  # 12 polls, 1 s apart
            readings.append(src.poll())
            now[0] += 1.0
        slots_asked = _count(fixture_server, "/slots")
        assert slots_asked == int(QUIET_AFTER_S), slots_asked  # idle since the first poll: 5 s later, quiet
        quiet = readings[-1]
        assert "so that the server can fall asleep after 60 s" in quiet.reasons["slots"]
        assert bool(quiet.slots) is metrics  # with /metrics: nothing moved, the slots read last stand
        if metrics:  # a request came: the counters moved, /slots is asked at once
            serve_llama_state(fixture_server, "idle-after")
            src.poll()
            assert _count(fixture_server, "/slots") == slots_asked + 1
        else:  # no /metrics: asked again only once it should be asleep (still awake: someone keeps it busy)
            now[0] += 60.0
            src.poll()
            assert _count(fixture_server, "/slots") == slots_asked + 1
    finally:
        src.close()

