"""Property tests: arbitrary bodies, log lines and file bytes give typed failures or partial values, never crashes."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvmon.sources.gguf_meta import GgufError, read_gguf_header
from kvmon.sources.llamacpp.args import parse_llama_server_args
from kvmon.sources.llamacpp.log import LlamaLogParser
from kvmon.sources.llamacpp.parse import MetricsTextError, parse_metrics, parse_slot

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["n_decoded", "n_remain", "x"]), inner, max_size=3),
    max_leaves=6,
)
slot_keys = st.sampled_from(["id", "n_ctx", "is_processing", "state", "next_token", "n_prompt_tokens", "n_past",
                             "n_prompt_tokens_processed", "n_prompt_tokens_cache", "id_task"])
slots_like = st.dictionaries(slot_keys, json_values, max_size=10)
FAST = settings(max_examples=int(os.environ.get("KVMON_FUZZ_EXAMPLES", "80")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
pytestmark = pytest.mark.fuzz


@FAST
@given(st.one_of(slots_like, json_values))
def test_parse_slot_never_raises(raw: object) -> None:
    reasons: dict[str, str] = {}
    s = parse_slot(raw, reasons)
    if s is not None:
        assert isinstance(s.id, int) and isinstance(s.processing, bool)
        for v in (s.n_ctx, s.context_tokens, s.n_decoded, s.n_remain, s.id_task):
            assert v is None or (isinstance(v, int) and not isinstance(v, bool))


@FAST
@given(st.text(max_size=300))
def test_parse_metrics_fails_only_with_caught_errors(text: str) -> None:
    try:
        out = parse_metrics(text)
    except MetricsTextError:
        return
    assert all(isinstance(v, float) for v in out.values())


@FAST
@given(st.lists(st.text(max_size=160), max_size=30))
def test_log_parser_never_raises(lines: list[str]) -> None:
    p = LlamaLogParser()
    for line in lines:
        p.feed(line)
    p.config()


@FAST
@given(st.lists(st.sampled_from(["-c", "-np", "-ctk", "-ctv", "-fa", "-ngl", "-m", "--port", "-ub", "--kv-unified",
                                 "q8_0", "0", "-1", "on", "x", "=", "--ctx-size=", "8192"]), max_size=12))
def test_argv_parser_never_raises(argv: list[str]) -> None:
    a = parse_llama_server_args(argv)
    assert a.config.n_ctx_total is None or a.config.n_ctx_total > 0


@FAST
@given(st.binary(max_size=200))
def test_gguf_reader_random_bytes(tmp_path_factory: object, data: bytes) -> None:
    path = Path(tmp_path_factory.mktemp("g")) / "x.gguf"  # type: ignore[attr-defined]
    for blob in (data, b"GGUF" + struct.pack("<I", 3) + data):
        path.write_bytes(blob)
        try:
            read_gguf_header(path)
        except GgufError:
            pass
