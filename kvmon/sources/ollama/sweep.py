"""How a sweep drives Ollama: ``/api/generate`` with ``raw`` text on the model already loaded, at the context it was
loaded with: the only option sent is ``num_predict`` (``num_ctx``, ``num_gpu``, ``num_batch`` and the like would load
the model again). Ollama's model server keeps the prompt's prefix cached; ``prompt_eval_count`` counts the whole
prompt (cached part included, as Ollama >= 0.30 does), ``eval_count``/``eval_duration`` give the decode rate.

Text goes in, so depths are in the model's tokens only once Ollama has counted them: the characters per token of
the filler are learnt from each answer, and each depth is the count Ollama gives.
"""

from __future__ import annotations

from typing import Any

from kvmon.core.jsonvals import json_float, json_int, json_str
from kvmon.core.sweep import StepTiming, SweepFailed
from kvmon.sources.sweep_http import ServerSweep, filler_text, json_lines

NS = 1e9
LOAD_TOO_LONG_S = 1.0  # a request that waited longer than this for the model loaded it (the sweep stops)


class OllamaSweep(ServerSweep):
    """Ollama's loaded model driven through a growing raw prompt."""

    def prepare(self, slot: int | None) -> None:
        """Find the model as loaded (``/api/ps``): a sweep never loads one."""
        ps = self.http.read_json("/api/ps")
        loaded = [json_str(m.get("name")) or json_str(m.get("model")) for m in (ps.get("models") or ())
                  if isinstance(m, dict)] if isinstance(ps, dict) else []
        loaded = [n for n in loaded if n]
        if self.model_id is not None:
            if self.model_id not in loaded:
                raise SweepFailed(f"{self.model_id} is not loaded in Ollama (a sweep never loads a model)")
            self.model = self.model_id
        elif loaded:
            # the model the dashboard shows, when it is among those loaded
            self.model = self.model_name if self.model_name in loaded else loaded[0]
        else:
            raise SweepFailed("no model is loaded in Ollama: load it by chatting with it first (a sweep never loads "
                              "one, which would load it with settings of its own)")

    def step(self, upto: int, generate: int) -> StepTiming:
        text = filler_text(upto, self.chars_per_token)
        body = {"model": self.model, "prompt": text, "raw": True, "stream": True,
                "options": {"num_predict": generate}}
        final: dict[str, Any] | None = None
        for _t, obj in json_lines(self.http.stream("/api/generate", body)):
            if isinstance(obj.get("error"), str):
                raise SweepFailed(f"Ollama stopped the request: {obj['error'][:200]}")
            if obj.get("done") is True:
                final = obj
        if final is None:
            raise SweepFailed(f"{self.display_url}/api/generate ended without its statistics")
        load_s = (json_float(final.get("load_duration")) or 0.0) / NS
        if load_s > LOAD_TOO_LONG_S:
            raise SweepFailed(f"Ollama loaded the model for this request ({load_s:.1f} s): another client changed "
                              "its settings, so the sweep stopped")
        depth = self.counted(text, json_int(final.get("prompt_eval_count")), "Ollama")
        prompt_ns = json_float(final.get("prompt_eval_duration"))
        n, eval_ns = json_int(final.get("eval_count")) or 0, json_float(final.get("eval_duration"))
        rate = n / eval_ns * NS if n > 1 and eval_ns else None
        return StepTiming(depth_tokens=depth, prompt_tokens_read=None, prompt_s=None if prompt_ns is None else
                          prompt_ns / NS, generated=n, decode_tok_s=rate if generate > 1 else None,
                          timing=self.timing, prompt_tokens_new=self.new_tokens(depth))
