"""Property tests of every reader of outside input: JSON bodies, /slots entries, /metrics text, Ollama's answers,
the proxy's stats document, a remote exporter's device text, log lines, GGUF headers, recording lines and proxied
request heads. Whatever comes in, each either gives values under the one rule (finite, within 64 bits, valid text) or
fails with its documented error, never with anything else.

A few hundred examples per test in CI (``KVMON_FUZZ_EXAMPLES``, default 200); ``bench/fuzz.py`` runs 10,000.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvmon.core.jsonvals import MAX_INT, InputError, parse_json
from kvmon.core.readings import SourceError
from kvmon.core.recorder import Recorder, read_recording, snapshot_to_dict
from kvmon.core.recording_csv import rows
from kvmon.core.snapshot import Alert, AlertLevel, Connection, ConnectionStatus, ModelView, SlotView, Snapshot
from kvmon.proxy.framing import MessageReader, ProtocolError
from kvmon.proxy.stats import parse_stats
from kvmon.sources.gguf_meta import GgufError, read_gguf_header
from kvmon.sources.hf_config import config_metadata
from kvmon.sources.llamacpp.log import LlamaLogParser
from kvmon.sources.llamacpp.parse import MetricsTextError, parse_metrics, parse_slot
from kvmon.sources.lmstudio.parse import parse_v0, parse_v1
from kvmon.sources.model_file import shape_of
from kvmon.sources.ollama.parse import parse_ps, parse_show
from kvmon.sources.remote_devices import parse_exporter_text
from kvmon.sources.vllm.parse import parse_metrics as parse_vllm_metrics
from kvmon.sources.vllm.parse import parse_models as parse_vllm_models

pytestmark = pytest.mark.fuzz

EXAMPLES = int(os.environ.get("KVMON_FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                                       HealthCheck.function_scoped_fixture])

# text with everything in it: lone surrogates, controls, astral characters
any_text = st.text(alphabet=st.characters(blacklist_categories=()), max_size=12)
huge_ints = st.one_of(st.integers(), st.sampled_from([2**63, 2**64, 2**64 + 1, 10**30, -(10**30), 10**400]))
scalars = st.one_of(st.none(), st.booleans(), huge_ints, st.floats(allow_nan=True, allow_infinity=True), any_text)


def json_values(keys: st.SearchStrategy[str] = any_text) -> st.SearchStrategy[Any]:
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
                        max_leaves=12)


def _wire(value: Any) -> bytes:
    """What a server would send for ``value`` (NaN and infinities as JSON's extensions, surrogates escaped)."""
    return json.dumps(value).encode()


def _valid(value: Any) -> None:
    """Every string encodes as UTF-8 and every integer fits 64 bits."""
    if isinstance(value, str):
        value.encode("utf-8")
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int):
        assert abs(value) <= MAX_INT
    elif isinstance(value, float):
        return
    elif isinstance(value, list):
        for v in value:
            _valid(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            _valid(k)
            _valid(v)


# ------------------------------------------------------------------------------------------------ JSON


@FUZZ
@given(st.one_of(json_values().map(_wire), st.binary(max_size=200),
                 st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n)))
def test_parse_json_gives_valid_values_or_input_error(data: bytes) -> None:
    try:
        value = parse_json(data)
    except InputError:
        return
    _valid(value)


SLOT_KEYS = st.sampled_from(["id", "n_ctx", "is_processing", "state", "next_token", "n_prompt_tokens", "n_past",
                             "n_prompt_tokens_processed", "n_prompt_tokens_cache", "id_task", "n_decoded", "n_remain"])


@FUZZ
@given(st.one_of(json_values(SLOT_KEYS), st.dictionaries(SLOT_KEYS, json_values(SLOT_KEYS), max_size=10)))
def test_parse_slot_never_raises(raw: Any) -> None:
    slot = parse_slot(parse_json(_wire(raw)), {})
    if slot is not None:
        for v in (slot.id, slot.n_ctx, slot.context_tokens, slot.n_decoded, slot.id_task):
            assert v is None or (isinstance(v, int) and abs(v) <= MAX_INT)


METRIC_VALUES = st.one_of(st.sampled_from(["1", "1e308", "1e400", "-5", "NaN", "+Inf", "9" * 400, "0x10", "", "1_0"]),
                          st.floats(allow_nan=True).map(repr), any_text)


@FUZZ
@given(st.lists(st.one_of(
    st.tuples(st.sampled_from(["llamacpp:n_decode_total", "llamacpp:prompt_tokens_total", "x"]), METRIC_VALUES)
    .map(lambda nv: f"# TYPE {nv[0]} counter\n{nv[0]} {nv[1]}"), any_text), max_size=8))
def test_parse_metrics_gives_finite_counters_or_its_error(lines: list[str]) -> None:
    try:
        out = parse_metrics("\n".join(lines) + "\n", [])
    except MetricsTextError:
        return
    assert all(isinstance(v, float) and math.isfinite(v) and 0 <= v <= 2.0**64 for v in out.values())


DEVICE_SERIES = st.sampled_from(["kvmon_gpu_vram_total_bytes", "kvmon_gpu_memory_busy_ratio", "kvmon_device_info",
                                  "kvmon_gpu_pcie_bandwidth_bytes_per_second", "kvmon_host_ram_total_bytes",
                                  "kvmon_last_poll_timestamp_seconds"])
GPU_LABELS = st.one_of(st.sampled_from(["0", "1", "63", "64", "\u00b2", "-1", "99999999999999999999"]), any_text)


@FUZZ
@given(st.lists(st.one_of(st.tuples(DEVICE_SERIES, GPU_LABELS, METRIC_VALUES).map(
    lambda s: f'{s[0]}{{gpu={json.dumps(s[1])},vendor_index={json.dumps(s[1])}}} {s[2]}'), any_text), max_size=8))
def test_a_remote_exporter_gives_plausible_devices_or_value_error(lines: list[str]) -> None:
    """A remote ``kvmon serve``'s text: devices with finite, non-negative values, or the parser's ValueError."""
    try:
        scrape = parse_exporter_text("\n".join(lines) + "\n", "remote")
    except ValueError:
        return
    for gpu in scrape.gpus:
        assert 0 <= gpu.index < 64
        for v in (gpu.vram_total_bytes, gpu.memory_busy_percent, gpu.vendor_index):
            assert v is None or (math.isfinite(v) and v >= 0)
    assert all(math.isfinite(v) and v >= 0 for v in scrape.host.values())


OLLAMA_KEYS = st.sampled_from(["models", "name", "model", "size", "size_vram", "digest", "details", "expires_at",
                               "context_length", "model_info", "tensors", "modelfile", "general.architecture",
                               "llama.block_count", "type", "shape", "parameter_size", "family"])


@FUZZ
@given(json_values(OLLAMA_KEYS))
def test_ollama_answers_give_values_or_source_error(raw: Any) -> None:
    body = parse_json(_wire(raw))
    for parse in (parse_ps, lambda b: parse_show(b, verbose=True), lambda b: parse_show(b, verbose=False)):
        try:
            parse(body)
        except SourceError:
            pass


STATS_KEYS = st.sampled_from(["kvmon_proxy", "in_flight", "recent", "id", "model", "tokens_so_far", "decode_tok_s",
                              "stats_source", "finished_unix", "now_unix", "prompt_tokens", "prompt_tok_s",
                              "prompt_tok_s_reason", "upstream", "context_tokens"])


@FUZZ
@given(st.one_of(json_values(STATS_KEYS), st.dictionaries(STATS_KEYS, json_values(STATS_KEYS)).map(
    lambda d: {**d, "kvmon_proxy": 1})))
def test_the_stats_document_gives_values_or_source_error(raw: Any) -> None:
    try:
        view = parse_stats(parse_json(_wire(raw)), 100.0, 1.7e9)
    except SourceError:
        return
    assert all(isinstance(s.id, int) for s in view.in_flight)


# ------------------------------------------------------------------------------------------------ logs


NUMBERS = st.one_of(st.integers(0, 10**6).map(str), st.sampled_from(["9" * 400, "1e400", "0.5", "9" * 30 + ".5"]))
LOG_TEMPLATES = [
    "llama_kv_cache: size = {0} MiB ( {1} cells, {1} layers, 1/1 seqs), K (f16): {0} MiB, V (f16): {0} MiB",
    "llama_context: n_ctx         = {1}", "load_tensors:   CUDA0 model buffer size = {0} MiB",
    "llama_kv_cache:   CUDA0 KV buffer size = {0} MiB", "srv    load_model: offloaded {1}/{1} layers to GPU",
    "initializing, n_slots = {1}, n_ctx_slot = {1}", "using device CUDA0 (NVIDIA X) - {1} MiB free",
    "  Device {1}: NVIDIA X, compute capability 8.6, VMM: yes, VRAM: {1} MiB", "found {1} CUDA devices:",
    "  - ROCm{1}   : AMD Radeon X ({1} MiB, {1} MiB free)", "ggml_metal_init: recommendedMaxWorkingSetSize = {0} MB",
    "| {1}|[level_zero:gpu:0]| Intel X| 1.3| 512| 1024| 32| {1}M| 1.3.2|", "verbosity = {1} (adjust with",
]


@FUZZ
@given(st.lists(st.one_of(any_text, st.tuples(st.sampled_from(LOG_TEMPLATES), NUMBERS, NUMBERS)
                          .map(lambda t: t[0].format(t[1], t[2]))), max_size=12))
def test_the_log_parser_never_raises(lines: list[str]) -> None:
    parser = LlamaLogParser()
    for line in lines:
        parser.feed(line)
    config = parser.config()
    for v in (config.n_ctx_total, config.kv_bytes_allocated, config.offloaded_layers):
        assert v is None or 0 <= v <= 2**64
    for d in config.devices:
        for v in (d.total_bytes, d.free_bytes, d.working_set_limit_bytes):
            assert v is None or 0 <= v <= 2**60
    parser.placement_hint()


# ------------------------------------------------------------------------------------------------ GGUF


def _gguf_value(draw: Any, depth: int = 0) -> tuple[int, bytes]:
    vtype = draw(st.integers(0, 13) if depth < 6 else st.integers(0, 8))
    if vtype == 9:  # array of ...
        etype, inner = _gguf_value(draw, depth + 1)
        count = draw(st.sampled_from([0, 1, 2, 3, 5000, 2**40]))
        return 9, struct.pack("<IQ", etype, count) + inner * min(count, 3)
    if vtype == 8:
        s = draw(st.binary(max_size=8))
        return 8, struct.pack("<Q", draw(st.sampled_from([len(s), len(s) + 9, 2**62]))) + s
    width = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}.get(vtype, 4)
    return vtype, draw(st.binary(min_size=width, max_size=width))


@st.composite
def gguf_files(draw: Any) -> bytes:
    kvs = []
    for _ in range(draw(st.integers(0, 4))):
        key = draw(st.sampled_from([b"general.architecture", b"llama.block_count", b"deep", b"\xff\xfe"]))
        vtype, value = _gguf_value(draw)
        kvs.append(struct.pack("<Q", len(key)) + key + struct.pack("<I", vtype) + value)
    counts = struct.pack("<QQ", draw(st.sampled_from([0, 1, 10**7])), draw(st.sampled_from([len(kvs), len(kvs) + 1])))
    return b"GGUF" + struct.pack("<I", draw(st.sampled_from([1, 2, 3, 4]))) + counts + b"".join(kvs) \
        + draw(st.binary(max_size=40))


@FUZZ
@given(st.one_of(gguf_files(), st.binary(max_size=120)))
def test_the_gguf_reader_fails_only_with_gguf_error(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    path = Path(tmp_path_factory.mktemp("g")) / "x.gguf"
    path.write_bytes(data)
    try:
        read_gguf_header(path)
    except GgufError:
        pass


# ------------------------------------------------------------------------------------------------ recordings


def _snapshot() -> dict[str, Any]:
    snap = Snapshot(seq=3, t_monotonic=12.5, t_wall=1.7e9, connection=Connection(ConnectionStatus.CONNECTED, "ok"),
                    backend="llama-server", model=ModelView(name="m", n_ctx=4096, kv_bytes_per_token=float("nan")),
                    slots=(SlotView(0, 4096, 100, True, 31.5),), decode_tok_s=31.5, ceiling_curve=((0, 60.0),),
                    alerts=(Alert(AlertLevel.WARNING, "x", "y", 1.0),), reasons={"a": "b"})
    return snapshot_to_dict(snap)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


BASE = _snapshot()
PATHS = _paths(BASE)[1:]


def _replace(doc: Any, path: tuple[Any, ...], new: Any) -> Any:
    doc = json.loads(json.dumps(doc))
    target = doc
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = new
    return doc


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(PATHS), json_values()), min_size=1, max_size=3),
       st.sampled_from(["", "\n", "x"]))
def test_the_recording_reader_skips_what_it_cannot_rebuild(tmp_path_factory: pytest.TempPathFactory,
                                                           edits: list[tuple[tuple[Any, ...], Any]], tail: str) -> None:
    path = Path(tmp_path_factory.mktemp("r")) / "rec.jsonl"
    Recorder(path).close()
    doc: Any = BASE
    for where, new in edits:
        try:
            doc = _replace(doc, where, new)
        except (KeyError, IndexError, TypeError):  # an earlier edit removed the place
            continue
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(doc) + "\n" + json.dumps(BASE) + "\n" + tail)
    snaps = list(read_recording(path).snapshots)
    assert snaps and snaps[-1].seq == 3  # the untouched line always comes back
    for s in snaps:
        assert math.isfinite(s.t_wall) and math.isfinite(s.t_monotonic)
    list(rows(snaps))  # and every rebuilt snapshot exports


# ------------------------------------------------------------------------------------------------ proxy heads

HEAD_PIECES = st.sampled_from([b"POST /api/chat HTTP/1.1\r\n", b"GET / HTTP/1.0\r\n", b"Host: x\r\n",
                               b"Content-Length: 3\r\n", b"Content-Length: +3\r\n", b"Transfer-Encoding: chunked\r\n",
                               b"Transfer-Encoding: xchunked\r\n", b" folded\r\n", b"\r\n", b"abc", b"0\r\n\r\n",
                               b"3\r\nabc\r\n", b"\n", b"\xff"])


@FUZZ
@given(st.lists(st.one_of(HEAD_PIECES, st.binary(max_size=12)), max_size=10), st.integers(1, 16))
def test_a_request_head_is_read_or_refused_with_protocol_error(pieces: list[bytes], step: int) -> None:
    data = b"".join(pieces)

    async def go() -> None:
        reader = asyncio.StreamReader()
        for i in range(0, len(data), step):
            reader.feed_data(data[i : i + step])
        reader.feed_eof()
        messages = MessageReader(reader)
        try:
            head = await messages.request_head(head_timeout_s=1.0, idle_timeout_s=1.0)
            if head is not None:
                async for _ in messages.body():
                    pass
        except (ProtocolError, asyncio.IncompleteReadError):
            pass

    asyncio.run(go())


VLLM_NAMES = st.sampled_from(["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:generation_tokens_total",
                              "vllm:num_requests_running", "vllm:time_to_first_token_seconds_sum",
                              "vllm:cache_config_info", "vllm:x"])
VLLM_LABELS = st.dictionaries(st.sampled_from(["model_name", "engine", "num_gpu_blocks", "block_size", "cache_dtype",
                                               "kv_cache_size_tokens"]),
                              st.one_of(any_text, METRIC_VALUES), max_size=4)


def _label_text(labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return "{" + inner + "}" if inner else ""


@FUZZ
@given(st.lists(st.one_of(st.tuples(VLLM_NAMES, VLLM_LABELS, METRIC_VALUES)
                          .map(lambda t: f"{t[0]}{_label_text(t[1])} {t[2]}"), any_text), max_size=8))
def test_vllm_metrics_give_finite_values_never_an_exception(lines: list[str]) -> None:
    page = parse_vllm_metrics("\n".join(lines) + "\n")
    for m in page.models.values():
        _valid(m.model_name)
        for v in (m.kv_usage_fraction, m.requests_running, m.generation_tokens_total, m.prompt_tokens_total):
            assert v is None or (math.isfinite(v) and v >= 0)
    c = page.cache
    for n in (c.num_gpu_blocks, c.block_size, c.kv_cache_size_tokens, c.capacity_tokens):
        assert n is None or (isinstance(n, int) and 0 <= n)


MODEL_KEYS = st.sampled_from(["data", "models", "id", "key", "root", "parent", "max_model_len", "loaded_instances",
                              "config", "context_length", "parallel", "flash_attention", "offload_kv_cache_to_gpu",
                              "quantization", "name", "size_bytes", "state", "compatibility_type", "model_type",
                              "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
                              "head_dim", "text_config", "layer_types", "sliding_window"])


@FUZZ
@given(json_values(MODEL_KEYS))
def test_vllm_lmstudio_and_hf_answers_give_values_never_an_exception(raw: Any) -> None:
    body = parse_json(_wire(raw))
    cards, _ = parse_vllm_models(body)
    for c in cards:
        _valid(c.id)
        assert c.max_model_len is None or 0 <= c.max_model_len <= MAX_INT
    for parse in (parse_v1, parse_v0):
        models, _ = parse(body)
        for m in models:
            _valid(m.key)
            assert m.size_bytes is None or 0 <= m.size_bytes <= MAX_INT
            for i in m.instances:
                assert i.context_length is None or 0 <= i.context_length <= MAX_INT
                assert i.flash_attention in (None, True, False)
    md, why, _ = config_metadata(body)
    assert (md is None) == (why is not None)
    if md is not None:
        shape, why = shape_of(md)  # a shape, or the reason why not: never an exception
        assert (shape is None) == (why is not None)
