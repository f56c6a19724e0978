"""Hostile servers on 127.0.0.1 against ``once``, the sources and the recorder: a head dripped byte by byte, odd
text, numbers too large for any type, a key echoed back, absurd values. Each bad value makes its own field unknown
(with a reason), never the whole reading, and nothing here may take longer than its bound.
"""

from __future__ import annotations

import argparse
import io
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers_hostile import RawServer, drip_head
from helpers_http import LLAMA_FIXTURES, FixtureServer, serve_llama_state
from ollama_fixture import OllamaFixture
from repo_paths import FIXTURES

from kvmon.app.build import open_monitor
from kvmon.cli.once import run
from kvmon.core.recorder import Recorder, read_recording
from kvmon.sources.ollama.source import OllamaSource

KEY = "hostile-test-key-5150"


def _args(url: str | None, **kw: Any) -> argparse.Namespace:
    base = {"url": url, "api_key": None, "log": None, "timeout": 1.0, "json": True, "interval": 0.3}
    base.update(kw)
    return argparse.Namespace(**base)


def _once(args: argparse.Namespace) -> tuple[int, str, str]:
    """``once`` writing UTF-8 bytes, as a real terminal or pipe does (a StringIO would accept any str)."""
    out_bytes, err_bytes = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_bytes, encoding="utf-8")
    err = io.TextIOWrapper(err_bytes, encoding="utf-8")
    rc = run(args, out, err)
    out.flush()
    err.flush()
    return rc, out_bytes.getvalue().decode("utf-8"), err_bytes.getvalue().decode("utf-8")


def _once_on(server: FixtureServer, **kw: Any) -> tuple[int, str, str]:
    """``once`` against ``server``, which is stopped afterwards."""
    try:
        return _once(_args(server.url, **kw))
    finally:
        server.stop()


def _llama(mutate_props: Any = None, mutate_slots: Any = None) -> FixtureServer:
    server = FixtureServer()
    serve_llama_state(server, "generating")
    props = json.loads((LLAMA_FIXTURES / "props.generating.json").read_text())
    slots = json.loads((LLAMA_FIXTURES / "slots.generating.json").read_text())
    if mutate_props:
        mutate_props(props)
    if mutate_slots:
        mutate_slots(slots)
    server.set("/props", 200, json.dumps(props))
    server.set("/slots", 200, json.dumps(slots))
    return server


# ------------------------------------------------------------------------------------------------ 1: drip


def test_a_head_dripped_byte_by_byte_ends_in_a_timeout_within_the_deadline() -> None:
    with RawServer(drip_head(0.1)) as server:
        result: list[tuple[int, str, str]] = []
        t0 = time.monotonic()
        worker = threading.Thread(target=lambda: result.append(_once(_args(server.url, timeout=0.5))), daemon=True)
        worker.start()
        worker.join(15)
        elapsed = time.monotonic() - t0
    assert result, "once still waiting 15 s on a server that drips its head (deadline 0.5 s per request)"
    rc, _, err = result[0]
    assert rc == 2 and "did not answer in time" in err
    assert elapsed < 15


# ------------------------------------------------------------------------------------------------ 3: text


def test_a_lone_surrogate_in_names_is_replaced_and_once_prints_valid_utf8() -> None:
    def names(p: dict[str, Any]) -> None:
        p["model_alias"] = "tiny\ud800model"

    server = _llama(names)
    rc, out, _ = _once_on(server)
    assert rc == 0
    doc = json.loads(out)
    assert doc["model"]["name"] == "tiny\ufffdmodel"


def test_a_lone_surrogate_does_not_stop_the_recorder(tmp_path: Path) -> None:
    server = _llama(lambda p: p.__setitem__("model_alias", "x\udc80y"))
    path = tmp_path / "rec.jsonl"
    try:
        with Recorder(path) as rec:
            monitor = open_monitor(server.url, timeout_s=1.0, gpu=False, host=False, recorder=rec)
            with monitor:
                snaps = [monitor.poll(), monitor.poll()]
    finally:
        server.stop()
    assert all(s.server_read for s in snaps)
    back = read_recording(path)
    assert len(back.snapshots) == 2 and back.snapshots[0].model.name == "x\ufffdy"


def test_a_lone_surrogate_in_an_ollama_model_name_leaves_the_poll_working() -> None:
    ollama = OllamaFixture()
    ps = json.loads((FIXTURES / "ollama" / "ps.full-offload.json").read_text())
    text = json.dumps(ps).replace('"name": "llama3.1:8b"', '"name": "llama3.1:8b\\ud800"')
    ollama.set("/api/ps", 200, text)
    src = OllamaSource(ollama.url, timeout_s=2.0, find_child=False, proxy_url="http://127.0.0.1:9")
    try:
        reading = src.poll()
    finally:
        src.close()
        ollama.stop()
    assert reading.model is not None and reading.model.name == "llama3.1:8b\ufffd"


# ------------------------------------------------------------------------------------------------ 4: huge ints


def test_a_400_digit_integer_in_props_is_unknown_not_a_number() -> None:
    server = _llama(lambda p: p.__setitem__("total_slots", int("9" * 400)))
    rc, out, _ = _once_on(server)
    assert rc == 0
    doc = json.loads(out)
    assert doc["model"]["n_slots"] in (None, 1)  # the slots still count themselves; never 10^400
    assert doc["model"]["name"] == "tiny-llama-e256-l4.gguf" and doc["context_tokens"] == 1066


def test_a_400_digit_counter_in_metrics_leaves_the_server_readable() -> None:
    server = _llama()
    server.set("/metrics", 200, "# TYPE llamacpp:n_decode_total counter\nllamacpp:n_decode_total " + "9" * 400
               + "\n# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 29\n",
               {"Content-Type": "text/plain; version=0.0.4"})
    monitor = open_monitor(server.url, timeout_s=1.0, gpu=False, host=False)
    try:
        snap = monitor.poll()
        reading = monitor.last_reading
    finally:
        monitor.close()
        server.stop()
    assert snap.server_read, snap.connection.reason
    assert reading is not None and "n_decode_total" not in reading.metrics
    assert reading.metrics.get("prompt_tokens_total") == 29.0  # the sane counter next to it is kept
    assert "n_decode_total" in reading.reasons.get("metrics", "")


# ------------------------------------------------------------------------------------------------ 7: proxy doc


@pytest.mark.parametrize("doc", [
    {"kvmon_proxy": 1, "in_flight": 5, "recent": "x"},
    {"kvmon_proxy": 1, "in_flight": [{"id": 1, "tokens_so_far": "many"}], "recent": [{"stats_source": 3,
                                                                                      "finished_unix": "now"}]},
    {"kvmon_proxy": 1, "in_flight": [{"id": 10 ** 400}], "recent": [{"stats_source": "ollama",
                                                                     "finished_unix": 1e308, "model": ["m"]}],
     "now_unix": -1e308, "upstream": 7},
])
def test_an_odd_stats_document_does_not_break_ollama_monitoring(doc: dict[str, Any]) -> None:
    ollama = OllamaFixture()
    fake_proxy = FixtureServer()
    fake_proxy.set("/kvmon/stats", 200, json.dumps(doc))
    src = OllamaSource(ollama.url, timeout_s=2.0, find_child=False, proxy_url=fake_proxy.url)
    try:
        reading = src.poll()
    finally:
        src.close()
        ollama.stop()
        fake_proxy.stop()
    assert reading.model is not None and reading.model.name == "llama3.1:8b"


# ------------------------------------------------------------------------------------------------ 13: secrets


def test_a_key_echoed_in_an_error_body_reaches_neither_stderr_nor_the_recording(tmp_path: Path) -> None:
    server = FixtureServer()
    echo = json.dumps({"error": {"message": f"invalid token; you sent Authorization: Bearer {KEY} (key {KEY})",
                                 "code": 401}})
    for path in ("/props", "/health", "/slots", "/metrics", "/v1/models", "/api/version", "/version"):
        server.set(path, 401, echo)
    try:
        rc, out, err = _once(_args(server.url, api_key=KEY))
        path = tmp_path / "rec.jsonl"
        with Recorder(path) as rec:
            monitor = open_monitor(server.url, api_key=KEY, timeout_s=1.0, gpu=False, host=False, recorder=rec)
            with monitor:
                snap = monitor.poll()
    finally:
        server.stop()
    assert rc == 2 and "rejected" in err
    assert KEY not in err and KEY not in out
    assert KEY not in (snap.connection.reason or "")
    assert KEY not in path.read_text(encoding="utf-8")


# ------------------------------------------------------------------------------------------------ 15: absurd


def test_an_impossible_context_size_is_unknown_with_a_reason() -> None:
    def huge(p: dict[str, Any]) -> None:
        p["default_generation_settings"]["n_ctx"] = 1e30

    def huge_slot(s: list[dict[str, Any]]) -> None:
        s[0]["n_ctx"] = 1e30

    server = _llama(huge, huge_slot)
    rc, out, _ = _once_on(server)
    assert rc == 0
    doc = json.loads(out)
    assert doc["model"]["n_ctx"] is None and doc["slots"][0]["n_ctx"] is None
    assert doc["context_tokens"] == 1066  # the slot's own count stays


def test_negative_counts_are_unknown() -> None:
    server = _llama(lambda p: p.__setitem__("total_slots", -2),
                    lambda s: s[0].__setitem__("n_prompt_tokens", -1103))
    rc, out, _ = _once_on(server)
    assert rc == 0
    doc = json.loads(out)
    assert doc["context_tokens"] is None and doc["slots"][0]["context_tokens"] is None
    assert doc["model"]["n_slots"] in (None, 1)


def test_a_zigzag_counter_gives_no_impossible_rate() -> None:
    """n_decoded 10 → 2·10⁹ → 10 → 2·10⁹ …: each rise would be billions of tokens a second; none is shown."""
    server = _llama()
    base = json.loads((LLAMA_FIXTURES / "slots.generating.json").read_text())
    answers = []
    for i in range(8):
        s = json.loads(json.dumps(base))
        s[0]["next_token"][0]["n_decoded"] = 2_000_000_000 if i % 2 else 10
        answers.append(json.dumps(s).encode())
    from helpers_http import CannedResponse

    with server._lock:
        server.sequences["/slots"] = [CannedResponse(200, a, {"Content-Type": "application/json"}) for a in answers]
    monitor = open_monitor(server.url, timeout_s=1.0, gpu=False, host=False)
    try:
        snaps = []
        for _ in range(7):
            snaps.append(monitor.poll())
            time.sleep(0.2)
    finally:
        monitor.close()
        server.stop()
    rates = [s.decode_tok_s for s in snaps]
    assert all(r is None or r < 1e6 for r in rates), rates
    assert any("decode_tok_s" in s.reasons and "bound" in s.reasons["decode_tok_s"] for s in snaps)


# ------------------------------------------------------------------------------------------------ vLLM, LM Studio


def test_a_hostile_vllm_page_leaves_once_working() -> None:
    """Bytes that are not UTF-8 in the model name (a lone surrogate in the JSON), a 400-digit counter, a usage of
    12 and a broken line: each makes only its own value unknown, and ``once`` prints valid UTF-8 JSON."""
    server = FixtureServer()
    name = "qwen\udcff"  # written out below as the raw byte 0xff
    page = "\n".join([
        f'vllm:num_requests_running{{engine="0",model_name="{name}"}} 1',
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="{name}"}} 12',
        f'vllm:generation_tokens_total{{engine="0",model_name="{name}"}} {"9" * 400}',
        f'vllm:prompt_tokens_total{{engine="0",model_name="{name}"}} 5',
        'vllm:cache_config_info{block_size="16",cache_dtype="fp8",engine="0",'
        'num_gpu_blocks="99999999999999999999999"} 1',
        'vllm:num_requests_waiting{engine="0" garbage',
    ]) + "\n"
    server.set("/metrics", 200, page.encode("utf-8", "surrogateescape"), {"Content-Type": "text/plain"})
    server.set("/version", 200, '{"version":"0.33.0"}')
    server.set("/v1/models", 200, json.dumps({"data": [{"id": "qwen\ud800", "root": "/nowhere",
                                                        "max_model_len": 10**30}]}))
    rc, out, _ = _once_on(server)
    assert rc == 0
    doc = json.loads(out)
    assert doc["backend"] == "vllm" and doc["model"]["name"] == "qwen\ufffd"
    assert doc["model"]["n_ctx_total"] is None and doc["model"]["n_ctx"] is None


def test_a_hostile_lmstudio_list_leaves_once_working() -> None:
    server = FixtureServer()
    body = {"models": [{"type": "llm", "key": "m\udfff", "architecture": 7, "size_bytes": 10**400,
                        "loaded_instances": [{"id": "m", "config": {"context_length": -4, "parallel": "lots",
                                                                      "flash_attention": "yes",
                                                                      "offload_kv_cache_to_gpu": None}}],
                        "max_context_length": 1e400}]}
    server.set("/api/v1/models", 200, json.dumps(body).replace("1e+400", "1e400"))
    rc, out, _ = _once_on(server)
    assert rc == 0
    doc = json.loads(out)
    assert doc["backend"] == "lmstudio" and doc["model"]["name"] == "m\ufffd"
    assert doc["model"]["n_ctx_total"] is None and doc["model"]["weight_bytes"] is None
