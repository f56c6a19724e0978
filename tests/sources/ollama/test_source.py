"""OllamaSource against a fake Ollama over real HTTP: models, VRAM/host split, shape, live-rate sources, bad input."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from ollama_fixture import OllamaFixture, fixture_bytes

from kvmon.core.readings import FailureKind, SourceError
from kvmon.sources.ollama.source import ENABLE_LIVE_RATE_HINT, OllamaSource


@pytest.fixture
def ollama() -> Iterator[OllamaFixture]:
    server = OllamaFixture()
    try:
        yield server
    finally:
        server.stop()


def _dead_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


def _source(url: str, **kw: object) -> OllamaSource:
    kw.setdefault("proxy_url", f"http://127.0.0.1:{_dead_port()}")
    kw.setdefault("find_child", False)
    kw.setdefault("timeout_s", 2.0)
    return OllamaSource(url, **kw)  # type: ignore[arg-type]


def test_full_offload_reading(ollama: OllamaFixture) -> None:
    src = _source(ollama.url)
    try:
        r = src.poll()
    finally:
        src.close()
    assert r.backend == "ollama" and r.server_version == "0.33.0" and r.state == "ok"
    m = r.model
    assert m is not None
    assert m.name == "llama3.1:8b" and m.arch == "llama" and m.quantization == "Q4_K_M"
    assert m.n_params == 8030261312  # exact, from general.parameter_count, not the "8.0B" label
    assert m.digest and m.digest.startswith("46e0c10c")
    assert m.weight_bytes == 5172420608  # summed from /api/show tensors, not /api/ps size (which holds KV too)
    assert m.shape is not None and m.shape.n_layers == 32 and m.shape_source == "ollama_show"
    assert m.n_ctx_train == 131072 and m.n_embd == 4096
    assert m.path and m.path.endswith("sha256-667b0c1932bc6ffc593ed1d03f895bf2dc8dc6df21db3042284a6f4416b06a29")
    assert r.weight_bytes_vram == 6654289920 and r.weight_bytes_host == 0
    assert r.config.n_ctx_per_slot == 8192
    # Ollama's defaults, marked as such: one slot, so the total context is context_length
    assert r.config.n_parallel == 1 and r.config.n_ctx_total == 8192 and r.config.kv_unified is False
    assert r.config.provenance["n_parallel"].value == "default"
    # no child search, no proxy: the rate is unavailable with how to enable it, and no slot claims a 0
    assert r.live_rate_source is None and r.slots == ()
    assert r.live_rate_unavailable_reason and ENABLE_LIVE_RATE_HINT in r.live_rate_unavailable_reason


def test_show_is_verbose_and_fetched_once_per_digest(ollama: OllamaFixture) -> None:
    src = _source(ollama.url)
    try:
        for _ in range(3):
            src.poll()
    finally:
        src.close()
    assert ollama.count("/api/ps") == 3
    assert ollama.count("/api/version") == 1
    assert ollama.bodies("/api/show") == [{"model": "llama3.1:8b", "verbose": True}]


def test_verbose_keeps_per_layer_arrays(ollama: OllamaFixture) -> None:
    ollama.set_file("/api/ps", "ps.several.json")  # granite4 has the later expires_at
    src = _source(ollama.url)
    try:
        r = src.poll()
    finally:
        src.close()
    assert r.model is not None and r.model.name == "granite4:tiny-h"
    shape = r.model.shape
    assert shape is not None and shape.n_layers == 40 and shape.n_kv_layers == 4  # 36 recurrent layers
    assert not shape.partial
    assert "llama3.1:8b" in r.reasons["other_models"]


def test_falls_back_to_non_verbose_show_and_marks_shape_partial(ollama: OllamaFixture) -> None:
    ollama.set_file("/api/ps", "ps.several.json")
    src = _source(ollama.url)
    original = src._fetch_show

    def no_verbose(name: str, *, verbose: bool) -> object:
        if verbose:  # as if the verbose body were too large to read
            raise SourceError(__import__("kvmon.core.readings", fromlist=["x"]).SourceFailure(
                FailureKind.UNEXPECTED_BODY, "/api/show body larger than the cap", "/api/show"))
        return original(name, verbose=verbose)

    src._fetch_show = no_verbose  # type: ignore[method-assign]
    try:
        r = src.poll()
    finally:
        src.close()
    assert r.model is not None and r.model.shape is not None
    assert r.model.shape.partial
    assert "blanks arrays" in r.reasons["shape"]


def test_partial_offload_reports_host_bytes(ollama: OllamaFixture) -> None:
    ollama.set_file("/api/ps", "ps.partial-offload.json")
    src = _source(ollama.url)
    try:
        r = src.poll()
    finally:
        src.close()
    assert r.weight_bytes_vram == 13958643712
    assert r.weight_bytes_host == 21474836480 - 13958643712
    assert "partial offload" in r.reasons["weight_bytes_host"]
    assert r.model is not None and r.model.arch == "gemma3"
    assert r.model.weight_bytes is None and "weights not known" in r.reasons["weight_bytes"]
    assert r.config.n_ctx_per_slot == 32768


def test_no_model_loaded(ollama: OllamaFixture) -> None:
    ollama.set_file("/api/ps", "ps.none.json")
    src = _source(ollama.url)
    try:
        r = src.poll()
    finally:
        src.close()
    assert r.state == "idle" and r.model is None and r.slots == ()
    assert "no model loaded" in r.reasons["model"]
    assert ollama.count("/api/show") == 0


def test_old_build_without_context_length(ollama: OllamaFixture) -> None:
    ollama.set_file("/api/ps", "ps.old-no-context-length.json")
    ollama.set_file("/api/version", "version-old.json")
    src = _source(ollama.url)
    try:
        r = src.poll()
    finally:
        src.close()
    assert r.server_version == "0.9.6"
    assert r.config.n_ctx_per_slot is None and "context_length" in r.reasons["n_ctx"]
    assert r.model is not None and r.model.name == "llama3.1:8b"


def test_show_failure_leaves_a_partial_reading_and_is_not_retried_every_poll(ollama: OllamaFixture) -> None:
    ollama.set("/api/show", 500, json.dumps({"error": "boom"}))
    src = _source(ollama.url)
    try:
        r1 = src.poll()
        r2 = src.poll()
    finally:
        src.close()
    for r in (r1, r2):
        assert r.model is not None and r.model.shape is None and r.model.name == "llama3.1:8b"
        assert "/api/show failed" in r.reasons["shape"]
        assert r.model.n_params == 8_000_000_000  # the "8.0B" label, the best left
    assert ollama.count("/api/show") == 2  # verbose then plain, once; not again on the second poll


def test_model_not_found_in_show(ollama: OllamaFixture) -> None:
    ps = json.loads(fixture_bytes("ps.full-offload.json"))
    ps["models"][0]["name"] = ps["models"][0]["model"] = "nosuch:latest"
    ollama.set("/api/ps", 200, json.dumps(ps))
    src = _source(ollama.url)
    try:
        r = src.poll()
    finally:
        src.close()
    assert r.model is not None and r.model.shape is None
    assert "not found" in r.reasons["shape"]


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (200, "<!doctype html><html>router login</html>", FailureKind.UNEXPECTED_BODY),
        (200, '{"models": 3}', FailureKind.UNEXPECTED_BODY),
        (200, '{"models": [', FailureKind.UNEXPECTED_BODY),
        (401, '{"error": "unauthorized"}', FailureKind.AUTH_REJECTED),
        (404, "404 page not found", FailureKind.NOT_FOUND),
        (500, '{"error": "internal"}', FailureKind.SERVER_ERROR),
    ],
)
def test_bad_ps_answers_are_typed_failures(ollama: OllamaFixture, status: int, body: str, kind: FailureKind) -> None:
    ollama.set("/api/ps", status, body)
    src = _source(ollama.url)
    try:
        with pytest.raises(SourceError) as e:
            src.poll()
    finally:
        src.close()
    assert e.value.failure.kind is kind


def test_malformed_ps_entries_are_skipped_with_a_note(ollama: OllamaFixture) -> None:
    good = json.loads(fixture_bytes("ps.full-offload.json"))["models"][0]
    bad_sizes = dict(good, name="weird:1", model="weird:1", size=-5, size_vram="lots", expires_at="soon")
    ollama.set("/api/ps", 200, json.dumps({"models": [7, {"size": 1}, bad_sizes, good]}))
    src = _source(ollama.url)
    try:
        r = src.poll()
    finally:
        src.close()
    assert "entry 0 is not an object" in r.reasons["models"] and "entry 1 has no name" in r.reasons["models"]
    assert r.model is not None and r.model.name == "llama3.1:8b"  # the one with a readable expires_at


def test_unreachable_and_hanging_server() -> None:
    src = _source(f"http://127.0.0.1:{_dead_port()}")
    try:
        with pytest.raises(SourceError) as e:
            src.poll()
    finally:
        src.close()
    assert e.value.failure.kind is FailureKind.UNREACHABLE

    server = OllamaFixture()
    server.hang("/api/version", 5)
    server.hang("/api/ps", 5)
    src = _source(server.url, timeout_s=0.3)
    try:
        with pytest.raises(SourceError) as e:
            src.poll()
    finally:
        src.close()
        server.stop()
    assert e.value.failure.kind is FailureKind.TIMEOUT


def test_bad_url_is_a_typed_failure() -> None:
    with pytest.raises(SourceError) as e:
        OllamaSource("ftp://127.0.0.1:11434")
    assert e.value.failure.kind is FailureKind.BAD_URL


def test_version_endpoint_garbage_is_not_fatal(ollama: OllamaFixture) -> None:
    ollama.set("/api/version", 200, "not json")
    src = _source(ollama.url)
    try:
        r = src.poll()
    finally:
        src.close()
    assert r.server_version is None and r.model is not None


# ------------------------------------------------------------------------------------- the proxy's stats


def _stats(upstream: str, **over: object) -> dict:
    doc = {
        "kvmon_proxy": 1,
        "upstream": upstream,
        "now_unix": 1796063900.0,
        "in_flight": [
            {"id": 12, "method": "POST", "path": "/api/chat", "model": "llama3.1:8b", "tokens_so_far": 40,
             "decode_tok_s": 38.5},
        ],
        "recent": [
            {"id": 11, "model": "llama3.1:8b", "finished_unix": 1796063890.0, "stats_source": "ollama",
             "prompt_tokens": 1200, "prompt_seconds": 0.04, "prompt_tok_s": None,
             "prompt_tok_s_reason": "Ollama >= 0.30 counts cached prompt tokens in prompt_eval_count",
             "predicted_tokens": 4, "predicted_seconds": 0.1, "decode_tok_s": 40.0, "context_tokens": 1204},
        ],
    }
    doc.update(over)
    return doc


def test_live_rate_from_the_proxy(ollama: OllamaFixture) -> None:
    proxy = OllamaFixture()
    proxy.set("/kvmon/stats", 200, json.dumps(_stats(ollama.url.replace("127.0.0.1", "localhost"))))
    src = _source(ollama.url, proxy_url=proxy.url)
    try:
        r = src.poll()
    finally:
        src.close()
        proxy.stop()
    assert r.live_rate_source == "proxy" and r.live_rate_unavailable_reason is None
    assert len(r.slots) == 1
    s = r.slots[0]
    assert s.id == 12 and s.processing and s.n_decoded == 40 and s.n_ctx == 8192
    last = r.last_request
    assert last is not None and last.predicted_tokens == 4 and last.predicted_seconds == 0.1
    assert last.context_tokens == 1204
    # the cached-inflated prompt count is withheld, so nobody divides it by the uncached duration
    assert last.prompt_tokens is None and last.prompt_seconds == 0.04
    assert "cached prompt tokens" in r.reasons["prefill_tok_s"]
    assert r.t_monotonic - last.t_end == pytest.approx(10.0, abs=0.01)


def test_proxy_for_another_upstream_is_ignored(ollama: OllamaFixture) -> None:
    proxy = OllamaFixture()
    proxy.set("/kvmon/stats", 200, json.dumps(_stats("http://10.0.0.9:11434")))
    src = _source(ollama.url, proxy_url=proxy.url)
    try:
        r = src.poll()
    finally:
        src.close()
        proxy.stop()
    assert r.live_rate_source is None and r.slots == ()
    assert r.live_rate_unavailable_reason and "not here" in r.live_rate_unavailable_reason


@pytest.mark.parametrize("body", ["<html>", '{"hello": 1}', '{"kvmon_proxy": 1, "in_flight": "x", "recent": [5]}'])
def test_proxy_garbage_does_not_break_the_poll(ollama: OllamaFixture, body: str) -> None:
    proxy = OllamaFixture()
    proxy.set("/kvmon/stats", 200, body)
    src = _source(ollama.url, proxy_url=proxy.url)
    try:
        r = src.poll()
    finally:
        src.close()
        proxy.stop()
    assert r.model is not None
    if r.live_rate_source == "proxy":  # a valid but empty document: no streams, no zero rate
        assert r.slots == () and r.last_request is None
    else:
        assert r.live_rate_unavailable_reason and ENABLE_LIVE_RATE_HINT in r.live_rate_unavailable_reason


def test_busy_model_in_the_proxy_wins_over_latest_expiry(ollama: OllamaFixture) -> None:
    ollama.set_file("/api/ps", "ps.several.json")
    proxy = OllamaFixture()
    proxy.set("/kvmon/stats", 200, json.dumps(_stats(ollama.url)))
    src = _source(ollama.url, proxy_url=proxy.url)
    try:
        r = src.poll()
    finally:
        src.close()
        proxy.stop()
    assert r.model is not None and r.model.name == "llama3.1:8b"


def test_untagged_request_name_matches_latest(ollama: OllamaFixture) -> None:
    ps = json.loads(fixture_bytes("ps.several.json"))
    ps["models"][0]["name"] = ps["models"][0]["model"] = "llama3.1:latest"
    ollama.set("/api/ps", 200, json.dumps(ps))
    stats = _stats(ollama.url)
    stats["in_flight"][0]["model"] = "llama3.1"  # clients may omit the tag
    stats["recent"][0]["model"] = "llama3.1"
    proxy = OllamaFixture()
    proxy.set("/kvmon/stats", 200, json.dumps(stats))
    src = _source(ollama.url, proxy_url=proxy.url)
    try:
        r = src.poll()
    finally:
        src.close()
        proxy.stop()
    assert r.model is not None and r.model.name == "llama3.1:latest"
    assert len(r.slots) == 1 and r.last_request is not None


def _write_gguf(path: Path) -> None:
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(4)
    w.add_context_length(32768)
    w.add_embedding_length(256)
    w.add_feed_forward_length(512)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_tensor("token_embd.weight", np.zeros((64, 32), dtype=np.float16))
    w.add_tensor("output_norm.weight", np.zeros((32,), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_local_model_file_fills_weights_and_shape(ollama: OllamaFixture, tmp_path: Path, monkeypatch) -> None:
    """The blob fills weights and shape when /api/show tells neither; it is read once per model digest (a blob
    is named by its content): later polls neither read nor stat it."""
    from kvmon.sources import model_file

    stats: list[str] = []
    real_stat = model_file.regular_stat
    monkeypatch.setattr(model_file, "regular_stat", lambda p: stats.append(p) or real_stat(p))
    blob = tmp_path / ("sha256-" + "ab" * 32)
    _write_gguf(blob)
    ollama.set_file("/api/ps", "ps.partial-offload.json")  # gemma3: /api/show lists no tensors
    show = json.loads(fixture_bytes("show.gemma3-27b.verbose.json"))
    show["modelfile"] = f"FROM {blob}\n"
    show["model_info"] = {}  # as if an old Ollama told nothing of the shape
    ollama.set("/api/show", 200, json.dumps(show))
    src = _source(ollama.url)
    try:
        r = src.poll()
        src.poll()
        src.poll()
    finally:
        src.close()
    assert stats == [str(blob)]
    m = r.model
    assert m is not None and m.path == str(blob)
    assert m.weight_bytes == 64 * 32 * 2 + 32 * 4
    assert m.shape is not None and m.shape.n_layers == 4 and m.shape_source == "gguf"
    assert "tensor directory" in r.reasons["weight_bytes"] and "shape" not in r.reasons


def test_unreadable_local_model_file_is_a_reason(ollama: OllamaFixture, tmp_path: Path) -> None:
    blob = tmp_path / ("sha256-" + "cd" * 32)
    blob.write_bytes(b"not a gguf at all, just some bytes")
    ollama.set_file("/api/ps", "ps.partial-offload.json")
    show = json.loads(fixture_bytes("show.gemma3-27b.verbose.json"))
    show["modelfile"] = f"FROM {blob}\n"
    ollama.set("/api/show", 200, json.dumps(show))
    src = _source(ollama.url)
    try:
        r = src.poll()
    finally:
        src.close()
    assert r.model is not None and r.model.weight_bytes is None and r.model.shape is not None  # from /api/show
    assert "not readable" in r.reasons["model_file"] and "weights not known" in r.reasons["weight_bytes"]


def test_settings_from_the_ollama_log_and_the_user(ollama: OllamaFixture, tmp_path: Path) -> None:
    from ollama_fixture import OLLAMA_FIXTURES

    from kvmon.core.readings import Provenance, ServerConfig

    src = _source(ollama.url, log_path=str(OLLAMA_FIXTURES / "server.log"))
    try:
        r = src.poll()
    finally:
        src.close()
    c = r.config
    assert c.type_k == c.type_v == "q8_0" and c.flash_attn == "on" and c.n_parallel == 2
    assert c.provenance["type_k"] is Provenance.LOG and c.provenance["n_parallel"] is Provenance.LOG
    assert c.n_ctx_total == 8192 * 2  # context_length per slot × slots

    src = _source(ollama.url, log_path=str(OLLAMA_FIXTURES / "server.log"),
                  config_override=ServerConfig(type_k="q4_0", type_v="q4_0"))
    try:
        c = src.poll().config
    finally:
        src.close()
    assert c.type_k == "q4_0" and c.provenance["type_k"] is Provenance.USER and c.n_parallel == 2

    empty = tmp_path / "ollama.log"
    empty.write_text("time=2026-11-30T18:20:01Z level=INFO msg=\"Listening on 127.0.0.1:11434\"\n")
    for path, why in ((empty, "no \"server config\" line"), (tmp_path / "missing.log", "not readable")):
        src = _source(ollama.url, log_path=str(path))
        try:
            r = src.poll()
        finally:
            src.close()
        assert why in r.reasons["log"] and r.config.type_k is None and r.config.n_parallel == 1


def test_server_config_line_parser() -> None:
    from kvmon.sources.ollama.child import parse_server_config_line

    line = 'level=INFO msg="server config" env="map[OLLAMA_KV_CACHE_TYPE: OLLAMA_NUM_PARALLEL:4 X:1]"'
    assert parse_server_config_line(line) == {"OLLAMA_KV_CACHE_TYPE": "", "OLLAMA_NUM_PARALLEL": "4"}
    assert parse_server_config_line('msg="Listening on 127.0.0.1:11434"') is None


def test_empty_tensor_directory_is_unknown_weights_not_zero(ollama: OllamaFixture, tmp_path: Path) -> None:
    """A model file whose tensor directory lists nothing says nothing of the weights: unknown, never 0 bytes."""
    import gguf

    blob = tmp_path / ("sha256-" + "ef" * 32)
    w = gguf.GGUFWriter(str(blob), "gemma3")
    w.add_block_count(62)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    ollama.set_file("/api/ps", "ps.partial-offload.json")
    show = json.loads(fixture_bytes("show.gemma3-27b.verbose.json"))
    show["modelfile"] = f"FROM {blob}\n"
    show["tensors"] = []  # an empty list is no more a size than an empty directory
    ollama.set("/api/show", 200, json.dumps(show))
    src = _source(ollama.url)
    try:
        r = src.poll()
    finally:
        src.close()
    assert r.model is not None and r.model.weight_bytes is None
    assert "lists no tensors" in r.reasons["model_file"]
    assert "weights not known" in r.reasons["weight_bytes"]
