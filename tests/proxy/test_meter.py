"""The proxy's meter reads a reply's stream: tokens and timings of each server's stream end, huge and split lines, the
rate past the first token."""

from __future__ import annotations

import json
import time

import pytest
from repo_paths import FIXTURES

from kvmon.proxy.meter import Meter
from kvmon.proxy.stats import LMSTUDIO_PREFILL_REASON, finished_record

FIXTURES = FIXTURES / "lmstudio"


def test_meter_reads_lmstudio_stats() -> None:
    m = Meter(1, "POST", "/api/v0/chat/completions", time.time(), time.monotonic())
    m.set_response(200, "application/json", None)
    m.feed((FIXTURES / "v0-chat.json").read_bytes(), time.monotonic())
    m.finish_body(time.monotonic())
    rec = finished_record(m, "other", None)
    assert rec["stats_source"] == "lmstudio"
    assert rec["decode_tok_s"] == pytest.approx(51.437, rel=1e-3) and rec["decode_tok_s_source"] == "server"
    assert rec["predicted_tokens"] == 53 and rec["predicted_seconds"] == pytest.approx(0.954)
    assert rec["context_tokens"] == 77 and rec["prompt_tok_s"] is None
    assert rec["prompt_tok_s_reason"] == LMSTUDIO_PREFILL_REASON


def test_meter_reads_the_v1_stream_end() -> None:
    m = Meter(2, "POST", "/api/v1/chat", time.time(), time.monotonic())
    m.set_response(200, "text/event-stream", None)
    now = time.monotonic()
    for k in range(5):
        m.feed(b'event: message.delta\ndata: {"type":"message.delta","content":"w"}\n\n', now + 0.02 * k)
    end = {"type": "chat.end", "result": {"model_instance_id": "openai/gpt-oss-20b", "output": [], "stats": {
        "input_tokens": 646, "total_output_tokens": 586, "reasoning_output_tokens": 0,
        "tokens_per_second": 29.753900615398926, "time_to_first_token_seconds": 1.088}}}
    m.feed(b"event: chat.end\ndata: " + json.dumps(end).encode() + b"\n\n", now + 0.2)
    rec = finished_record(m, "other", None)
    assert m.chunks == 5 and m.model == "openai/gpt-oss-20b"
    assert rec["decode_tok_s"] == pytest.approx(29.75, rel=1e-3) and rec["context_tokens"] == 646 + 586


def test_meter_rate_leaves_out_the_tokens_that_came_at_once_with_the_first() -> None:
    """Tokens that reach the proxy together (an upstream or a network that buffers) were made before they came: the
    first burst starts the clock, and only the tokens after it count against the time since (10 a second here, not
    19 over one second)."""
    m = Meter(id=1, method="POST", path="/api/chat", started_unix=0.0, started_mono=0.0)
    m.set_response(200, "application/x-ndjson", None)
    line = b'{"message":{"content":"a"},"done":false}\n'
    m.feed(line * 9, 1.0)  # nine at once
    assert m.in_flight_rate() is None
    m.feed(line * 10, 2.0)
    assert m.in_flight_rate() == pytest.approx(10.0)


def test_meter_handles_huge_and_split_lines() -> None:
    m = Meter(id=1, method="POST", path="/api/chat", started_unix=0.0, started_mono=0.0)
    m.set_response(200, "application/x-ndjson", None)
    m.feed(b'{"message":{"content":"a"},"done":false}\n{"message":', 1.0)
    m.feed(b'{"content":"b"},"done":false}\n', 2.0)
    m.feed(b"x" * (2 * 1024 * 1024), 2.5)  # an endless line: skipped, not buffered
    m.feed(b"\n" + b'{"message":{"content":"c"},"done":false}', 3.0)
    m.finish_body(4.0)
    assert m.chunks == 3 and m.unparsed_lines == 1
    assert m.in_flight_rate() == pytest.approx(2 / 3.0)
    gz = Meter(id=2, method="POST", path="/api/chat", started_unix=0.0, started_mono=0.0)
    gz.set_response(200, "application/x-ndjson", "gzip")
    gz.feed(b'{"message":{"content":"a"},"done":false}\n', 1.0)
    assert gz.chunks == 0 and gz.format is None  # compressed bodies are relayed, not read
