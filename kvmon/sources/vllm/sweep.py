"""How a sweep drives vLLM: token ids (from its ``/tokenize``) to ``/v1/completions``, streamed, with prefix caching
(on by default in vLLM's V1 engine) keeping each step's prefix. vLLM's answers carry no timings, so the stream times
them: decode is the tokens after the first over the time from the first to the last, and the prompt's read time is
the wait for the first token (a little more than the prefill: one decode step and the network).
"""

from __future__ import annotations

import time
from typing import Any

from kvmon.core.jsonvals import json_int, json_str
from kvmon.core.sweep import StepTiming, SweepFailed
from kvmon.sources.llamacpp.sweep import FILLER
from kvmon.sources.sweep_http import SweepHttp, json_lines


class VllmSweep:
    """vLLM's served model driven through a growing token-id prompt."""

    timing = "stream"

    def __init__(self, base_url: str, *, api_key: str | None = None, model_id: str | None = None,
                 model_name: str | None = None) -> None:
        self.http = SweepHttp(base_url, api_key=api_key)
        self.display_url = self.http.display_url
        self._wanted = model_id or model_name
        self.model: str | None = None
        self._tokens: list[int] = []
        self._depth = 0

    def prepare(self, slot: int | None) -> None:
        """The served model's name, and the filler as its tokens."""
        doc = self.http.get_json("/v1/models")
        ids = [json_str(m.get("id")) for m in (doc.get("data") or ()) if isinstance(m, dict)] \
            if isinstance(doc, dict) else []
        ids = [i for i in ids if i]
        if not ids:
            raise SweepFailed(f"{self.display_url}/v1/models lists no model")
        self.model = self._wanted if self._wanted in ids else ids[0]
        tok = self.http.post_json("/tokenize", {"model": self.model, "prompt": FILLER})
        tokens = tok.get("tokens") if isinstance(tok, dict) else None
        self._tokens = [t for t in tokens or () if isinstance(t, int) and not isinstance(t, bool) and t >= 0]
        if not self._tokens:
            raise SweepFailed(f"{self.display_url}/tokenize gave no tokens for the filler text")

    def _prompt(self, n: int) -> list[int]:
        return (self._tokens * (n // len(self._tokens) + 1))[:max(1, n)]

    def prefill(self, upto: int) -> StepTiming:
        return self._complete(upto, 1)

    def measure(self, upto: int, generate: int) -> StepTiming:
        return self._complete(upto, generate)

    def _complete(self, upto: int, max_tokens: int) -> StepTiming:
        prompt = self._prompt(upto)
        body: dict[str, Any] = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
                                "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
        sent = time.monotonic()
        times: list[float] = []
        usage: dict[str, Any] | None = None
        for t, obj in json_lines(self.http.stream("/v1/completions", body), b"data: "):
            if isinstance(obj.get("usage"), dict):
                usage = obj["usage"]
            for choice in obj.get("choices") or ():
                if isinstance(choice, dict) and choice.get("text"):
                    times.append(t)
        depth = json_int(usage.get("prompt_tokens")) if usage else None
        depth = depth or len(prompt)
        n = json_int(usage.get("completion_tokens")) if usage else None
        n = n or len(times)
        rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 2 and times[-1] > times[0] else None
        new = depth - self._depth if depth > self._depth else depth
        self._depth = depth
        return StepTiming(depth_tokens=depth, prompt_tokens_read=None,
                          prompt_s=(times[0] - sent) if times else None, generated=n,
                          decode_tok_s=rate if max_tokens > 1 else None, timing="stream", prompt_tokens_new=new)

    def cancel(self) -> None:
        self.http.cancel()

    def close(self) -> None:
        self.http.close()
