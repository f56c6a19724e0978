"""How a sweep drives llama-server: one conversation as a token array to ``/completion`` with the prompt cache on,
on the slot the plan chose (``id_slot``), streamed so that a cancel reaches the server, and timed by the server's own
``timings`` (``cache_n`` reused, ``prompt_n`` read, ``predicted_per_second``).

A model of a router is driven through the router: ``"model"`` in the body and ``?autoload=false``, so the sweep never
loads a model that is not loaded (the router refuses instead).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from kvmon.core.jsonvals import json_float, json_int
from kvmon.core.sweep import StepTiming, SweepFailed
from kvmon.sources.sweep_http import FILLER, ServerSweep, json_lines


class LlamaServerSweep(ServerSweep):
    """One llama-server (or one model of a router) driven through a growing conversation."""

    prefill_generate = 0

    def _body(self, **kw: Any) -> dict[str, Any]:
        return {**kw, "model": self.model_id} if self.model_id else kw

    def prepare(self, slot: int | None) -> None:
        """Tokenize the filler on the server (its own vocabulary) and remember the slot to use."""
        self._slot = slot
        self._query = f"?autoload=false&model={quote(self.model_id, safe='')}" if self.model_id else ""
        self.tokenize_filler("/tokenize" + self._query, self._body(content=FILLER))

    def step(self, upto: int, generate: int) -> StepTiming:
        body = self._body(prompt=self.filler_prompt(upto), n_predict=generate, cache_prompt=True,
                          stream=True, ignore_eos=True)
        if self._slot is not None:
            body["id_slot"] = self._slot
        final: dict[str, Any] | None = None
        for _t, obj in json_lines(self.http.stream("/completion" + self._query, body), b"data: "):
            if obj.get("stop") is True:
                final = obj
            elif isinstance(obj.get("error"), dict):
                raise SweepFailed(f"{self.display_url} stopped the request: {obj['error'].get('message', '')}")
        timings = final.get("timings") if final else None
        if not isinstance(timings, dict):
            raise SweepFailed(f"{self.display_url}/completion ended without its timings")
        cache_n, prompt_n = json_int(timings.get("cache_n")) or 0, json_int(timings.get("prompt_n"))
        predicted_n = json_int(timings.get("predicted_n")) or 0
        rate = json_float(timings.get("predicted_per_second"))
        ms = json_float(timings.get("predicted_ms"))
        if rate is None and ms and predicted_n > 1:
            rate = (predicted_n - 1) / ms * 1000.0
        prompt_ms = json_float(timings.get("prompt_ms"))
        return StepTiming(depth_tokens=cache_n + (prompt_n or 0), prompt_tokens_read=prompt_n,
                          prompt_s=None if prompt_ms is None else prompt_ms / 1000.0, generated=predicted_n,
                          decode_tok_s=rate if generate > 1 and rate else None, timing=self.timing)
