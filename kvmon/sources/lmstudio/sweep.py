"""How a sweep drives LM Studio: its REST chat (``/api/v0/chat/completions``) on the model already loaded, one user
message growing step by step (its llama.cpp engine keeps the prompt's prefix cached), timed by the ``stats`` each
answer carries: ``tokens_per_second`` for decode, ``time_to_first_token`` for reading the prompt, and the depth from
``usage.prompt_tokens``. A model that is not loaded is never asked for (LM Studio would load it on demand).
"""

from __future__ import annotations

from typing import Any

from kvmon.core.jsonvals import json_float, json_int, json_str
from kvmon.core.sweep import StepTiming, SweepFailed
from kvmon.sources.llamacpp.sweep import FILLER
from kvmon.sources.sweep_http import SweepHttp


class LmStudioSweep:
    """LM Studio's loaded model driven through a growing chat message."""

    timing = "server"

    def __init__(self, base_url: str, *, api_key: str | None = None, model_id: str | None = None,
                 model_name: str | None = None) -> None:
        self.http = SweepHttp(base_url, api_key=api_key)
        self.display_url = self.http.display_url
        self._wanted = model_id or model_name
        self.model: str | None = None
        self._chars_per_token = 4.0
        self._depth = 0

    def prepare(self, slot: int | None) -> None:
        """The loaded model (``/api/v0/models``, ``state: loaded``): a sweep never loads one."""
        doc = self.http.get_json("/api/v0/models")
        loaded = [json_str(m.get("id")) for m in (doc.get("data") or ()) if isinstance(m, dict)
                  and m.get("state") == "loaded" and m.get("type", "llm") == "llm"] if isinstance(doc, dict) else []
        loaded = [m for m in loaded if m]
        if not loaded:
            raise SweepFailed("no model is loaded in LM Studio: load it first (a sweep never loads one)")
        self.model = self._wanted if self._wanted in loaded else loaded[0]

    def _text(self, tokens: int) -> str:
        n = max(1, int(tokens * self._chars_per_token))
        return (FILLER * (n // len(FILLER) + 1))[:n]

    def prefill(self, upto: int) -> StepTiming:
        return self._chat(upto, 1)

    def measure(self, upto: int, generate: int) -> StepTiming:
        return self._chat(upto, generate)

    def _chat(self, upto: int, max_tokens: int) -> StepTiming:
        text = self._text(upto)
        body: dict[str, Any] = {"model": self.model, "messages": [{"role": "user", "content": text}],
                                "max_tokens": max_tokens, "temperature": 0, "stream": False}
        doc = self.http.post_json("/api/v0/chat/completions", body)
        if not isinstance(doc, dict):
            raise SweepFailed(f"{self.display_url}/api/v0/chat/completions did not answer an object")
        usage = doc.get("usage") if isinstance(doc.get("usage"), dict) else {}
        stats = doc.get("stats") if isinstance(doc.get("stats"), dict) else {}
        depth = json_int(usage.get("prompt_tokens"))
        if not depth:
            raise SweepFailed("LM Studio did not count the prompt's tokens")
        self._chars_per_token = len(text) / depth
        new = depth - self._depth if depth > self._depth else depth
        self._depth = depth
        n = json_int(usage.get("completion_tokens")) or 0
        rate = json_float(stats.get("tokens_per_second"))
        return StepTiming(depth_tokens=depth, prompt_tokens_read=None,
                          prompt_s=json_float(stats.get("time_to_first_token")), generated=n,
                          decode_tok_s=rate if max_tokens > 1 and n > 1 else None, timing="server",
                          prompt_tokens_new=new)

    def cancel(self) -> None:
        self.http.cancel()

    def close(self) -> None:
        self.http.close()
