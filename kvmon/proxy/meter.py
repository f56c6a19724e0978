"""What one proxied request shows: the response body read along (Ollama NDJSON, SSE, a JSON body), chunk times
(about one token each, for the in-flight rate) and the final statistics the body carried.

``kvmon.proxy.stats`` turns a Meter into its record in the ``/kvmon/stats`` document.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from kvmon.proxy.prompts import Compared

MAX_LINE_BYTES = 1024 * 1024  # a longer NDJSON/SSE line is relayed but not parsed
MAX_JSON_BODY_BYTES = 8 * 1024 * 1024  # non-streamed JSON bodies parsed for stats up to this size
BodyFormat = Literal["ndjson", "sse", "json"]
FORMATS: dict[str, BodyFormat] = {"application/x-ndjson": "ndjson", "application/jsonl": "ndjson",
                                  "application/ndjson": "ndjson", "text/event-stream": "sse",
                                  "application/json": "json"}  # and any other type ending in +json


def content_of(obj: dict[str, Any]) -> bool:
    """Whether one streamed object carries generated text (≈ one token)."""
    msg = obj.get("message")
    if isinstance(msg, dict) and (msg.get("content") or msg.get("thinking") or msg.get("tool_calls")):
        return True
    if obj.get("response") or obj.get("thinking"):
        return True
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        c = choices[0]
        delta = c.get("delta")
        if isinstance(delta, dict) and (
            delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls")
        ):
            return True
        if isinstance(c.get("text"), str) and c["text"]:
            return True
    return isinstance(obj.get("content"), str) and bool(obj["content"])


@dataclass
class Meter:
    """What one proxied request showed: chunk times and the final statistics its body carried."""

    id: int
    method: str
    path: str
    started_unix: float
    started_mono: float
    model: str | None = None
    status: int | None = None
    format: BodyFormat | None = None  # None: a body not read (compressed, or another type)
    chunks: int = 0  # content-bearing chunks (≈ tokens)
    first_token_mono: float | None = None
    last_token_mono: float | None = None
    first_burst_chunks: int = 0  # the chunks that came at the first chunk's time (made before it: not timed)
    unparsed_lines: int = 0
    stats_source: str | None = None  # "ollama" | "llama-server" | "lmstudio" | "openai_usage"
    server_timed: bool = False  # the reply carried the server's own timings: OpenAI usage does not replace them
    final: dict[str, Any] = field(default_factory=dict)
    aborted: bool = False
    abort_reason: str | None = None
    finished_unix: float | None = None
    prompt: Compared | None = None  # its prompt against the one before it in its conversation (kvmon.proxy.prompts)
    _line_buf: bytearray = field(default_factory=bytearray)
    _skip_line: bool = False
    _json_buf: bytearray = field(default_factory=bytearray)
    _json_overflow: bool = False

    # -- feeding

    def set_response(self, status: int, content_type: str | None, content_encoding: str | None) -> None:
        self.status = status
        ct = (content_type or "").split(";", 1)[0].strip().lower()
        compressed = (content_encoding or "identity").lower() not in ("identity", "")  # relayed, not read
        self.format = None if compressed else FORMATS.get(ct, "json" if ct.endswith("+json") else None)

    def feed(self, payload: bytes, now: float) -> None:
        """Read a piece of the (de-chunked) response body; never raises on bad content."""
        if not payload or self.format is None:
            return
        if self.format == "json":
            if not self._json_overflow:
                self._json_buf += payload
                if len(self._json_buf) > MAX_JSON_BODY_BYTES:
                    self._json_overflow, self._json_buf = True, bytearray()
            return
        start = 0
        while True:
            nl = payload.find(b"\n", start)
            if nl < 0:
                rest = payload[start:]
                if not self._skip_line:
                    self._line_buf += rest
                    if len(self._line_buf) > MAX_LINE_BYTES:
                        self._line_buf, self._skip_line = bytearray(), True
                        self.unparsed_lines += 1
                return
            piece = payload[start:nl]
            start = nl + 1
            if self._skip_line:
                self._skip_line = False
                continue
            if self._line_buf:
                self._line_buf += piece
                line = bytes(self._line_buf)
                self._line_buf = bytearray()
            else:
                line = piece
            self._line(line.rstrip(b"\r"), now)

    def finish_body(self, now: float) -> None:
        """The body ended: parse what is left (a last line without newline, a whole JSON body)."""
        if self.format == "json" and self._json_buf and not self._json_overflow:
            try:
                obj = json.loads(bytes(self._json_buf))
            except ValueError:
                self.unparsed_lines += 1
            else:
                if isinstance(obj, dict):
                    self._object(obj, now, streamed=False)
            self._json_buf = bytearray()
        elif self._line_buf and not self._skip_line:
            line = bytes(self._line_buf)
            self._line_buf = bytearray()
            self._line(line.rstrip(b"\r"), now)

    def _line(self, line: bytes, now: float) -> None:
        if not line.strip():
            return
        if self.format == "sse":
            if not line.startswith(b"data:"):
                return  # event:, id:, retry:, comments
            line = line[5:].strip()
            if line == b"[DONE]":
                return
        try:
            obj = json.loads(line)
        except ValueError:
            self.unparsed_lines += 1
            return
        if isinstance(obj, dict):
            self._object(obj, now, streamed=True)
        else:
            self.unparsed_lines += 1

    def _object(self, obj: dict[str, Any], now: float, *, streamed: bool) -> None:
        if obj.get("type") == "chat.end" and isinstance(obj.get("result"), dict):
            obj = obj["result"]  # LM Studio REST v1 streaming: the last event carries the whole answer
            streamed = False
        if self.model is None and isinstance(obj.get("model"), str):
            self.model = obj["model"]
        if self.model is None and isinstance(obj.get("model_instance_id"), str):
            self.model = obj["model_instance_id"]
        if streamed and content_of(obj):
            self.chunks += 1
            if self.first_token_mono is None:
                self.first_token_mono = now
            if now == self.first_token_mono:
                self.first_burst_chunks += 1
            self.last_token_mono = now
        if obj.get("done") is True and ("eval_count" in obj or "prompt_eval_count" in obj or "eval_duration" in obj):
            self.stats_source = "ollama"
            self.final = {k: obj.get(k) for k in ("prompt_eval_count", "prompt_eval_duration", "eval_count",
                                                   "eval_duration", "total_duration", "load_duration")}
        timings = obj.get("timings")
        if isinstance(timings, dict) and ("predicted_n" in timings or "prompt_n" in timings):
            self.stats_source, self.server_timed = "llama-server", True
            self.final = dict(timings)
        usage = obj.get("usage")
        lm = obj.get("stats")
        if isinstance(lm, dict) and "tokens_per_second" in lm:
            # LM Studio: REST v0 stats{tokens_per_second, time_to_first_token, generation_time} beside OpenAI usage;
            # REST v1 stats{input_tokens, total_output_tokens, tokens_per_second, time_to_first_token_seconds}
            u = usage if isinstance(usage, dict) else {}
            self.stats_source, self.server_timed = "lmstudio", True
            self.final = {
                "prompt_tokens": lm.get("input_tokens", u.get("prompt_tokens")),
                "completion_tokens": lm.get("total_output_tokens", u.get("completion_tokens")),
                "tokens_per_second": lm.get("tokens_per_second"),
                "generation_time": lm.get("generation_time"),
                "time_to_first_token": lm.get("time_to_first_token", lm.get("time_to_first_token_seconds")),
                "model_load_time": lm.get("model_load_time_seconds"),
            }
            return
        if isinstance(usage, dict) and usage and not self.server_timed:
            self.stats_source = "openai_usage"
            details = usage.get("prompt_tokens_details")
            self.final = {
                "prompt_tokens": usage.get("prompt_tokens"),
                "completion_tokens": usage.get("completion_tokens"),
                "cached_tokens": details.get("cached_tokens") if isinstance(details, dict) else None,
            }

    # -- reading

    def in_flight_rate(self) -> float | None:
        """Tokens per second between the first and the latest content chunk; None below two chunks. The chunks that
        came with the first (a buffered burst) are its start, not tokens made in the time since."""
        if self.chunks < 2 or self.first_token_mono is None or self.last_token_mono is None:
            return None
        span = self.last_token_mono - self.first_token_mono
        return (self.chunks - self.first_burst_chunks) / span if span > 0 else None

    @property
    def generated(self) -> bool:
        """Whether this request produced something worth listing in ``recent``."""
        return self.stats_source is not None or self.chunks > 0


def model_from_request(body: bytes) -> str | None:
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(obj, dict) and isinstance(obj.get("model"), str):
        return obj["model"]
    return None
