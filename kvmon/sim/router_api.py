"""The HTTP API of the simulated llama-server router (``kvmon.sim.multi.MultiSim`` with a router scenario).

Shaped like llama.cpp b11549's ``tools/server/server-models.cpp``: ``GET /props`` without ``model`` answers the
router's own document (``role: router``); ``GET /models`` and ``/v1/models`` list every model with
``status.value``, ``status.args``, ``exit_code``/``failed`` after a failed start, ``context_length`` and, while it
runs, the model server's ``meta``; ``GET /models/sse`` streams ``model_status`` (a spawn) and ``status_change``
events (``progress`` while loading, ``exit_code`` on exit), one ``data:`` line each; ``POST /models/load`` and
``/models/unload``; per-model GETs (``/props``, ``/slots``, ``/metrics``) take ``?model=`` and LOAD an unloaded model
unless ``autoload=false``; completions take ``"model"`` in the body. Error bodies are the captured ones of a real
router (``tests/fixtures/llama-router/README.md``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from kvmon.sim.llama_api import BAD_KEY, BUILD_INFO, LOADING, NOT_FOUND, error_body
from kvmon.sim.reply import Reply, dumps, json_reply, parse_body

PROXY_GETS = ("/props", "/slots", "/metrics", "/lora-adapters")
PROXY_POSTS = ("/completion", "/completions", "/v1/completions", "/chat/completions", "/v1/chat/completions",
               "/v1/responses", "/v1/embeddings", "/tokenize", "/detokenize", "/apply-template", "/infill")
SSE_POLL_S = 0.1


class RouterApi:
    """Routes one request of the simulated router."""

    public_paths = ("/health", "/v1/health")

    def __init__(self, sim: Any) -> None:
        self.sim = sim

    def unauthorized(self, headers: dict[str, str]) -> Reply:
        return json_reply(BAD_KEY, 401, close=True)

    def handle(self, method: str, path: str, query: dict[str, str], headers: dict[str, str], raw: bytes) -> Reply:
        if method == "GET" and path in ("/health", "/v1/health"):
            return json_reply({"status": "ok"})
        if method == "GET" and path == "/props" and not query.get("model"):
            return json_reply(self.props())
        if method == "GET" and path in ("/models", "/v1/models"):
            return json_reply(self.models())
        if method == "GET" and path == "/models/sse":
            return Reply(200, content_type="text/event-stream", stream=self.sse())
        if method == "POST" and path in ("/models/load", "/models/unload"):
            body = parse_body(raw)
            if body is None:
                return json_reply(error_body(500, "[json.exception.parse_error.101] parse error", "server_error"), 500)
            return self.load(body) if path.endswith("load") and not path.endswith("unload") else self.unload(body)
        if (method == "GET" and path in PROXY_GETS) or (method == "POST" and path in PROXY_POSTS):
            return self.proxy(method, path, query, headers, raw)
        return json_reply(NOT_FOUND, 404)

    # -- the router's own documents -------------------------------------------------------------------
    def props(self) -> dict[str, Any]:
        return {"role": "router", "max_instances": self.sim.scenario.models_max, "models_autoload": True,
                "model_alias": "llama-server", "model_path": "none",
                "default_generation_settings": {"params": None, "n_ctx": 0}, "ui_settings": {},
                "build_info": BUILD_INFO, "cors_proxy_enabled": False}

    def _meta(self, name: str) -> dict[str, Any] | None:
        """The model server's own ``/v1/models`` meta, merged while it runs (as the router merges loaded_info)."""
        c = self.sim.children.get(name)
        if c is None or self.sim.status(name) not in ("loaded", "sleeping"):
            return None
        reply = c.server.api.models()
        data = json.loads(reply.body).get("data") or [{}]
        meta = data[0].get("meta")
        return meta if isinstance(meta, dict) else None

    def models(self) -> dict[str, Any]:
        now = self.sim.clock.now()
        created = int(self.sim.clock.wall())
        data = []
        for spec in self.sim.scenario.models:
            st = self.sim.status(spec.name, now)
            c = self.sim.children.get(spec.name)
            # a stopping model stays "loaded" until its process has exited; a failed one is "unloaded" + failed
            value = "unloaded" if st == "failed" else "loaded" if st == "unloading" else st
            status: dict[str, Any] = {"value": value, "args": self.sim.args(spec.name, None if c is not None else 0)}
            if st == "failed":
                status["exit_code"] = c.exit_code if c is not None else 1
                status["failed"] = True
            entry: dict[str, Any] = {
                "id": spec.name, "aliases": [], "tags": [], "object": "model", "owned_by": "llamacpp",
                "created": created, "status": status,
                "architecture": {"input_modalities": ["text"], "output_modalities": ["text"]},
                "source": "models_dir", "can_remove": False,
            }
            if n_ctx_train := _ctx_train(spec.scenario):
                entry["context_length"] = n_ctx_train
            if (meta := self._meta(spec.name)) is not None:
                entry["meta"] = meta
            data.append(entry)
        return {"data": data, "object": "list"}

    def sse(self) -> Iterator[bytes]:
        """Every status event from now on, one ``data:`` line each (no replay of earlier ones, no pings)."""
        seen = len(self.sim.events)
        while not self.sim.stopping.is_set():
            events = self.sim.events[seen:]
            seen += len(events)
            for e in events:
                yield b"data: " + dumps({"model": e.model, "event": e.event, "data": e.data}) + b"\n\n"
            if not events:
                self.sim.stopping.wait(SSE_POLL_S)

    def load(self, body: dict[str, Any]) -> Reply:
        name = body.get("model")
        now = self.sim.clock.now()
        if not isinstance(name, str) or self.sim.scenario.spec(name) is None:
            return json_reply(NOT_FOUND, 404)  # the HTTP layer's 404 body replaces the handler's message
        if self.sim.running(name, now):
            return json_reply(error_body(400, "model is already running", "invalid_request_error"), 400)
        self.sim.spawn(name, now)
        return json_reply({"success": True})

    def unload(self, body: dict[str, Any]) -> Reply:
        name = body.get("model")
        now = self.sim.clock.now()
        if not isinstance(name, str) or self.sim.scenario.spec(name) is None:
            return json_reply(error_body(400, "model is not found", "invalid_request_error"), 400)
        if not self.sim.unload(name, now):
            return json_reply(error_body(400, "model is not running", "invalid_request_error"), 400)
        return json_reply({"success": True})

    # -- per-model requests ---------------------------------------------------------------------------
    def _ready(self, name: str, autoload: bool, *, by_get: bool) -> Reply | None:
        """None when the model runs (after loading it if ``autoload``); else the router's error."""
        now = self.sim.clock.now()
        if self.sim.running(name, now):
            return None
        if not autoload:
            return json_reply(error_body(400, "model is not loaded", "invalid_request_error"), 400)
        if by_get:
            self.sim.autoloads.append(name)
        if not self.sim.spawn_and_wait(name, now):
            return json_reply(error_body(500, "model failed to load", "server_error"), 500)
        return None

    def _model(self, name: Any) -> Reply | None:
        if not isinstance(name, str) or not name:
            return json_reply(error_body(400, "model name is missing from the request", "invalid_request_error"),
                              400)
        if self.sim.scenario.spec(name) is None:
            return json_reply(error_body(400, f"model '{name}' not found", "invalid_request_error"), 400)
        return None

    def proxy(self, method: str, path: str, query: dict[str, str], headers: dict[str, str], raw: bytes) -> Reply:
        """A request for one model (``?model=`` on a GET, ``"model"`` in a POST's body), answered by its server."""
        by_get = method == "GET"
        body = {} if by_get else parse_body(raw)
        if body is None:
            return json_reply(error_body(400, "Failed to parse the request body as JSON", "invalid_request_error"),
                              400)
        name = query.get("model") if by_get else body.get("model")
        bad = self._model(name) or self._ready(str(name), query.get("autoload", "true") in ("true", "1"),
                                               by_get=by_get)
        if bad is not None:
            return bad
        if not by_get or path == "/slots":  # a task on the model server's queue: it wakes a sleeping model
            self.sim.touch(str(name), self.sim.clock.now())
        reply = self.sim.children[str(name)].server.answer(method, path, query, headers, raw)
        return reply if reply is not None else json_reply(LOADING, 503)


def _ctx_train(sc: Any) -> int | None:
    from kvmon.sim.model import resolve_preset

    md = resolve_preset(sc).metadata
    arch = md.get("general.architecture", "")
    value = md.get(f"{arch}.context_length")
    return int(value) if isinstance(value, int) else None
