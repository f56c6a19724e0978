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
from kvmon.sources.sweep_http import FILLER, ServerSweep, json_lines


class VllmSweep(ServerSweep):
    """vLLM's served model driven through a growing token-id prompt."""

    timing = "stream"

    def prepare(self, slot: int | None) -> None:
        """The served model's name, and the filler as its tokens."""
        doc = self.http.read_json("/v1/models")
        ids = [json_str(m.get("id")) for m in (doc.get("data") or ()) if isinstance(m, dict)] \
            if isinstance(doc, dict) else []
        ids = [i for i in ids if i]
        if not ids:
            raise SweepFailed(f"{self.display_url}/v1/models lists no model")
        wanted = self.model_id or self.model_name
        self.model = wanted if wanted in ids else ids[0]
        self.tokenize_filler("/tokenize", {"model": self.model, "prompt": FILLER})

    def step(self, upto: int, generate: int) -> StepTiming:
        prompt = self.filler_prompt(upto)
        body: dict[str, Any] = {"model": self.model, "prompt": prompt, "max_tokens": generate, "ignore_eos": True,
                                "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
        sent = time.monotonic()
        times: list[float] = []
        usage: dict[str, Any] = {}  # the last chunk's count of the prompt's and the answer's tokens
        for t, obj in json_lines(self.http.stream("/v1/completions", body), b"data: "):
            if isinstance(obj.get("usage"), dict):
                usage = obj["usage"]
            for choice in obj.get("choices") or ():
                if isinstance(choice, dict) and choice.get("text"):
                    times.append(t)
        depth = json_int(usage.get("prompt_tokens")) or len(prompt)
        n = json_int(usage.get("completion_tokens")) or len(times)
        rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 2 and times[-1] > times[0] else None
        return StepTiming(depth_tokens=depth, prompt_tokens_read=None,
                          prompt_s=(times[0] - sent) if times else None, generated=n,
                          decode_tok_s=rate if generate > 1 else None, timing=self.timing,
                          prompt_tokens_new=self.new_tokens(depth))
