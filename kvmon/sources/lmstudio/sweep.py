"""How a sweep drives LM Studio: its REST chat (``/api/v0/chat/completions``) on the model already loaded, one user
message growing step by step (its llama.cpp engine keeps the prompt's prefix cached), timed by the ``stats`` each
answer carries: ``tokens_per_second`` for decode, ``time_to_first_token`` for reading the prompt, and the depth from
``usage.prompt_tokens``. A model that is not loaded is never asked for (LM Studio would load it on demand).
"""

from __future__ import annotations

from typing import Any

from kvmon.core.jsonvals import json_float, json_int, json_object, json_str
from kvmon.core.sweep import StepTiming, SweepFailed
from kvmon.sources.sweep_http import ServerSweep, filler_text


class LmStudioSweep(ServerSweep):
    """LM Studio's loaded model driven through a growing chat message."""

    def prepare(self, slot: int | None) -> None:
        """The loaded model (``/api/v0/models``, ``state: loaded``): a sweep never loads one."""
        doc = self.http.read_json("/api/v0/models")
        loaded = [json_str(m.get("id")) for m in (doc.get("data") or ()) if isinstance(m, dict)
                  and m.get("state") == "loaded" and m.get("type", "llm") == "llm"] if isinstance(doc, dict) else []
        loaded = [m for m in loaded if m]
        if not loaded:
            raise SweepFailed("no model is loaded in LM Studio: load it first (a sweep never loads one)")
        wanted = self.model_id or self.model_name
        self.model = wanted if wanted in loaded else loaded[0]

    def step(self, upto: int, generate: int) -> StepTiming:
        text = filler_text(upto, self.chars_per_token)
        body: dict[str, Any] = {"model": self.model, "messages": [{"role": "user", "content": text}],
                                "max_tokens": generate, "temperature": 0, "stream": False}
        doc = self.http.read_json("/api/v0/chat/completions", body)
        if not isinstance(doc, dict):
            raise SweepFailed(f"{self.display_url}/api/v0/chat/completions did not answer an object")
        usage = json_object(doc.get("usage"))
        stats = json_object(doc.get("stats"))
        depth = self.counted(text, json_int(usage.get("prompt_tokens")), "LM Studio")
        n = json_int(usage.get("completion_tokens")) or 0
        rate = json_float(stats.get("tokens_per_second"))
        return StepTiming(depth_tokens=depth, prompt_tokens_read=None,
                          prompt_s=json_float(stats.get("time_to_first_token")), generated=n,
                          decode_tok_s=rate if generate > 1 and n > 1 else None, timing=self.timing,
                          prompt_tokens_new=self.new_tokens(depth))
