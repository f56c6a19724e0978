"""The HTTP API of the simulated LM Studio (``kvmon.sim.server.SimServer`` with an ``lmstudio`` scenario).

Shaped like the documentation's examples (lmstudio-ai/docs ``1_developer/2_rest/``): ``GET /api/v1/models``
(``list.md``: ``{"models": [...]}`` with ``loaded_instances[].config``), ``GET /api/v0/models`` (``endpoints.mdx``:
``data[]`` with ``state``), ``POST /api/v0/chat/completions`` (OpenAI body plus ``stats``, ``model_info``,
``runtime``), ``POST /api/v1/chat`` (``chat.md``: ``output[]`` and ``stats``; with ``stream`` the events of
``streaming-events.md``, ending in ``chat.end`` whose ``result`` is the whole answer) and the OpenAI-compatible
``/v1/models``. No metrics endpoint, as LM Studio has none. A scenario with an ``lmstudio_version`` before 0.4 answers
404 on every ``/api/v1/`` path (REST v1 came with 0.4.0).

The model file LM Studio loaded sits under ``<files>/models/<publisher>/<name>-GGUF/`` (its folder layout), with
the model's GGUF file (its real tensor directory, the data a hole).
"""

from __future__ import annotations

import os
import secrets
import string
from collections.abc import Iterator
from typing import Any

from kvmon.core.jsonvals import json_array
from kvmon.sim.files import gguf_metadata, write_gguf_header
from kvmon.sim.reply import (
    Reply,
    answer_text,
    dumps,
    estimate_tokens,
    json_reply,
    token_text,
    tokens_as_they_come,
    wait_end,
    wait_until,
)
from kvmon.sim.requests import SimRequest
from kvmon.sim.served import ServedSimulation

# the documentation's example runtime (the simulator does not vary it by GPU; kvmon does not read it)
RUNTIME = {"name": "llama.cpp-mac-arm64-apple-metal-advsimd", "version": "1.3.0", "supported_formats": ["gguf"]}
EMBEDDING = {"type": "embedding", "publisher": "nomic-ai", "key": "text-embedding-nomic-embed-text-v1.5",
             "display_name": "Nomic Embed Text v1.5", "quantization": {"name": "F16", "bits_per_weight": 16},
             "size_bytes": 274290560, "params_string": None, "loaded_instances": [], "max_context_length": 2048,
             "format": "gguf"}


class LmStudioApi:
    """Routes one request of the simulated LM Studio."""

    def __init__(self, sim: ServedSimulation) -> None:
        self.sim = sim
        self.v1 = tuple(int(x) for x in sim.scenario.lmstudio_version.split(".")[:2]) >= (0, 4)
        model = sim.engine.model_at(0.0)
        self.quant = model.quantization
        self.key = sim.scenario.model_alias
        publisher, _, name = self.key.rpartition("/")
        self.models_dir = os.path.join(getattr(sim, "files_dir", ""), "models")
        folder = os.path.join(self.models_dir, publisher or "local", f"{name}-GGUF")
        os.makedirs(folder, exist_ok=True)
        self.model_file = os.path.join(folder, f"{name}-{self.quant}.gguf")
        write_gguf_header(self.model_file, gguf_metadata(model), model.tensors)
        self._weights = int(model.weight_bytes)
        self._arch = str(model.preset.metadata.get("general.architecture", ""))

    def handle(self, method: str, path: str, query: dict[str, str], body: dict[str, Any] | None) -> Reply:
        if path.startswith("/api/v1/") and not self.v1:
            return json_reply({"error": "Unexpected endpoint or method. (GET /api/v1/models)"}, 404)
        if method == "GET" and path == "/api/v1/models":
            return json_reply({"models": [self._v1_entry(), EMBEDDING]})
        if method == "GET" and path == "/api/v0/models":
            return json_reply({"object": "list", "data": [self._v0_entry()]})
        if method == "GET" and path == "/v1/models":
            return json_reply({"object": "list", "data": [{"id": self.key, "object": "model",
                                                           "owned_by": "organization_owner"}]})
        if method == "POST" and path in ("/api/v0/chat/completions", "/api/v1/chat"):
            if body is None:
                return json_reply({"error": "'messages' field is required"}, 400)
            return self.chat_v0(body) if path.endswith("completions") else self.chat_v1(body)
        return json_reply({"error": f"Unexpected endpoint or method. ({method} {path})"}, 404)

    def _n_ctx(self) -> int:
        return int(self.sim.engine.slot_ctx(self.sim.clock.now()))

    def _v1_entry(self) -> dict[str, Any]:
        s = self.sim.scenario
        return {"type": "llm", "publisher": self.key.rpartition("/")[0] or "local", "key": self.key,
                "display_name": self.key.rpartition("/")[2], "architecture": self._arch,
                "quantization": {"name": self.quant, "bits_per_weight": 4}, "size_bytes": self._weights,
                "params_string": None,
                "loaded_instances": [{"id": self.key, "config": {
                    "context_length": self._n_ctx(), "eval_batch_size": 512, "parallel": s.n_parallel,
                    "flash_attention": s.flash_attn == "on", "offload_kv_cache_to_gpu": True}}],
                "max_context_length": int(self.sim.engine.model_at(0.0).shape.n_ctx_train or self._n_ctx()),
                "format": "gguf", "capabilities": {"vision": False, "trained_for_tool_use": True},
                "description": None}

    def _v0_entry(self) -> dict[str, Any]:
        return {"id": self.key, "object": "model", "type": "llm", "publisher": self.key.rpartition("/")[0],
                "arch": self._arch, "compatibility_type": "gguf", "quantization": self.quant, "state": "loaded",
                "max_context_length": int(self.sim.engine.model_at(0.0).shape.n_ctx_train or 0)}

    # -- generation -----------------------------------------------------------------------------------
    def _submit(self, body: dict[str, Any], text: str) -> SimRequest:
        n = body.get("max_tokens", body.get("max_output_tokens"))
        n_predict = n if isinstance(n, int) and n > 0 else 128
        # its llama.cpp engine keeps the prompt's prefix cached, as llama-server does
        return self.sim.engine.submit(max(1, estimate_tokens(text)), n_predict, {"stream": bool(body.get("stream"))},
                                      prompt=text)

    @staticmethod
    def _rate(req: SimRequest) -> float:
        return req.predicted_n / req.predicted_s if req.predicted_s > 0 else 0.0

    def _ttft(self, req: SimRequest) -> float:
        return (float(req.token_times[0]) if len(req.token_times) else req.t_prefill_end) - req.t_arrive

    def chat_v0(self, body: dict[str, Any]) -> Reply:
        msgs = json_array(body.get("messages"))
        req = self._submit(body, " ".join(str(m.get("content", "")) for m in msgs if isinstance(m, dict)))
        wait_end(self.sim, req)
        prompt = req.cache_n + req.prompt_n
        return json_reply({
            "id": "chatcmpl-" + "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(21)),
            "object": "chat.completion", "created": int(self.sim.clock.wall()), "model": self.key,
            "choices": [{"index": 0, "logprobs": None, "finish_reason": "stop", "message": {
                "role": "assistant", "content": answer_text(req)}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": req.predicted_n,
                      "total_tokens": prompt + req.predicted_n},
            "stats": {"tokens_per_second": self._rate(req), "time_to_first_token": round(self._ttft(req), 3),
                      "generation_time": round(req.predicted_s, 3), "stop_reason": "eosFound"},
            "model_info": {"arch": self._arch, "quant": self.quant, "format": "gguf", "context_length": self._n_ctx()},
            "runtime": RUNTIME})

    def _v1_result(self, req: SimRequest) -> dict[str, Any]:
        return {"model_instance_id": self.key,
                "output": [{"type": "message", "content": answer_text(req)}],
                "stats": {"input_tokens": req.cache_n + req.prompt_n, "total_output_tokens": req.predicted_n,
                          "reasoning_output_tokens": 0, "tokens_per_second": self._rate(req),
                          "time_to_first_token_seconds": round(self._ttft(req), 3)},
                "response_id": f"resp_{req.id_task}"}

    def chat_v1(self, body: dict[str, Any]) -> Reply:
        given = body.get("input", "")
        text = given if isinstance(given, str) else str(given)
        req = self._submit(body, text)
        if not body.get("stream"):
            wait_end(self.sim, req)
            return json_reply(self._v1_result(req))

        def event(kind: str, data: dict[str, Any]) -> bytes:
            return f"event: {kind}\n".encode() + b"data: " + dumps({"type": kind, **data}) + b"\n\n"

        def gen() -> Iterator[bytes]:
            yield event("chat.start", {"model_instance_id": self.key})
            yield event("prompt_processing.start", {})
            yield from wait_until(self.sim.clock, req.t_prefill_end, self.sim.stopping)
            yield event("prompt_processing.end", {})
            yield event("message.start", {})
            yield from tokens_as_they_come(self.sim, req,
                                           lambda k: event("message.delta", {"content": token_text(req.id_task, k)}))
            yield event("message.end", {})
            yield event("chat.end", {"result": self._v1_result(req)})

        return Reply(200, content_type="text/event-stream", stream=gen())
