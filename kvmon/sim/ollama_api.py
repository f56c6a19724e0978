"""The Ollama HTTP API of the simulator (shaped like Ollama 0.33's answers; sizes and durations from physics).

Endpoints: ``GET /`` ("Ollama is running"), /api/version, /api/ps, /api/tags, ``POST /api/show``,
/api/chat and /api/generate (NDJSON stream or one object; final stats in nanoseconds; ``raw`` prompts; the prompt's
prefix the model server cached is not read again, and ``prompt_eval_count`` counts it, as Ollama >= 0.30 does), and
the OpenAI-compatible /v1/chat/completions (``usage`` only, no timings, like Ollama). A request whose ``num_ctx``
differs from the loaded context loads the model again (``load_duration``), as Ollama does; a client that goes away
cancels its request.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

from kvmon.core.jsonvals import json_array, json_object
from kvmon.sim.files import gguf_metadata
from kvmon.sim.ollama_child import CHILD_PREFIX
from kvmon.sim.reply import (
    Reply,
    StreamAborted,
    answer_text,
    dumps,
    estimate_tokens,
    json_reply,
    token_text,
    tokens_as_they_come,
    wait_end,
)
from kvmon.sim.requests import SimRequest
from kvmon.sim.served import ServedSimulation

KEEP_ALIVE_S = 300.0
RELOAD_S = 6.0  # loading the model again for another num_ctx
NDJSON = "application/x-ndjson"


def _iso(ts: float) -> str:
    """Ollama's RFC 3339 time with nanoseconds (``2026-11-30T18:37:10.100000000Z``)."""
    dt = datetime.fromtimestamp(ts, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond * 1000:09d}Z"


def _short_arrays(value: Any) -> Any:
    """Non-verbose /api/show replaces every array longer than 5 with []."""
    if isinstance(value, (list, tuple)):
        return [] if len(value) > 5 else list(value)
    return value


class OllamaApi:
    """Routes one request of the simulated Ollama server to its answer."""

    def __init__(self, sim: ServedSimulation) -> None:
        self.sim = sim
        self.name = sim.scenario.model_alias
        self.digest = hashlib.sha256(self.name.encode()).hexdigest()
        self._child: Any = None
        self._loaded_at: dict[int, float] = {}  # epochs this API loaded for a request: when each was ready

    def _model(self) -> Any:
        return self.sim.engine.model_at(self.sim.clock.now())

    def details(self) -> dict[str, Any]:
        md = self._model().preset.metadata
        arch = str(md.get("general.architecture", ""))
        n_params = self._model().n_params
        size = f"{n_params / 1e9:.1f}B" if isinstance(n_params, (int, float)) else self.name.rsplit(":", 1)[-1].upper()
        return {"parent_model": "", "format": "gguf", "family": arch, "families": [arch], "parameter_size": size,
                "quantization_level": self._model().quantization}

    def handle(self, method: str, path: str, query: dict[str, str], body: dict[str, Any] | None) -> Reply:
        """Answer one request (faults and auth were dealt with by the server)."""
        routes: dict[tuple[str, str], Callable[[], Reply]] = {
            ("GET", "/"): lambda: Reply(200, b"Ollama is running", "text/plain; charset=utf-8"),
            ("GET", "/api/version"): lambda: json_reply({"version": self.sim.scenario.ollama_version}),
            ("GET", "/api/ps"): self.ps, ("GET", "/api/tags"): self.tags,
            ("POST", "/api/show"): lambda: self.show(body or {}),
            ("POST", "/api/chat"): lambda: self.generate(body or {}, chat=True),
            ("POST", "/api/generate"): lambda: self.generate(body or {}, chat=False),
            ("POST", "/v1/chat/completions"): lambda: self.v1_chat(body or {}),
        }
        if path.startswith(CHILD_PREFIX):  # the simulated model server process asks its answers here
            return self._child_api().handle(method, path[len(CHILD_PREFIX):] or "/", query, body)
        fn = routes.get((method, path))
        if fn is None:
            return Reply(404, b"404 page not found", "text/plain; charset=utf-8")
        if body is None:
            return json_reply({"error": "invalid character in request body"}, 400)
        if method == "POST" and (unknown := self._known(body)) is not None:  # every POST names its model
            return unknown
        return fn()

    def _child_api(self) -> Any:
        """The llama-server answers of Ollama's model server, from the same simulation."""
        if self._child is None:
            from kvmon.sim.llama_api import LlamaApi

            self._child = LlamaApi(self.sim)
        return self._child

    def _known(self, body: dict[str, Any]) -> Reply | None:
        name = body.get("model") or body.get("name")
        if name not in (self.name, self.name.split(":")[0], self.name + ":latest"):
            return json_reply({"error": f"model '{name}' not found"}, 404)
        return None

    def ps(self) -> Reply:
        now = self.sim.clock.now()
        if self.sim.engine.loading(now):
            return json_reply({"models": []})
        m = self._model()
        expires = self.sim.clock.wall() + KEEP_ALIVE_S
        entry = {"name": self.name, "model": self.name, "size": m.size_bytes(), "digest": self.digest,
                 "details": self.details(), "expires_at": _iso(expires), "size_vram": m.size_vram_bytes(),
                 "context_length": self.sim.engine.slot_ctx(now)}
        return json_reply({"models": [entry]})

    def tags(self) -> Reply:
        m = self._model()
        return json_reply({"models": [{"name": self.name, "model": self.name,
                                       "modified_at": _iso(self.sim.clock.wall() - 86400 * 7),
                                       "size": m.weight_bytes, "digest": self.digest, "details": self.details()}]})

    def show(self, body: dict[str, Any]) -> Reply:
        verbose = bool(body.get("verbose"))
        m = self._model()
        md = dict(m.preset.metadata)
        # what Ollama adds from the file: its type number, the parameter count it sums over the tensors
        md.update({k: v for k, v in gguf_metadata(m).items() if k == "general.file_type"})
        if m.n_params:
            md["general.parameter_count"] = m.n_params
        md["general.quantization_version"] = 2
        info = {k: (v if verbose else _short_arrays(v)) for k, v in sorted(md.items())}
        # every GGUF model's tensors, verbose or not (server/routes.go GetModelInfo): name, type, shape innermost first
        tensors = [{"name": t.name, "type": t.ggml_type.name, "shape": list(t.shape)} for t in m.tensors or ()]
        modelfile = (f"# Modelfile generated by \"ollama show\"\n# To build a new Modelfile based on this, replace "
                     f"FROM with:\n# FROM {self.name}\n\nFROM {self.sim.model_path}\n"
                     'TEMPLATE """{{ .Prompt }}"""\n')
        return json_reply({
            "license": "", "modelfile": modelfile, "parameters": "", "template": "{{ .Prompt }}",
            "details": self.details(), "model_info": info, "tensors": tensors, "capabilities": ["completion"],
            "modified_at": _iso(self.sim.clock.wall() - 86400 * 7),
        })

    def _submit(self, body: dict[str, Any], chat: bool) -> SimRequest:
        if chat:
            msgs = json_array(body.get("messages"))
            text = "".join(str(m.get("content", "")) for m in msgs if isinstance(m, dict))
            prompt_tokens = estimate_tokens(text) + 4 * len(msgs)
        else:
            text = str(body.get("prompt", ""))
            prompt_tokens = estimate_tokens(text)
        opts = json_object(body.get("options"))
        n_predict = opts.get("num_predict", body.get("max_tokens"))
        if not isinstance(n_predict, int) or n_predict <= 0:
            n_predict = 128
        self._reload_for(opts.get("num_ctx"))
        return self.sim.engine.submit(prompt_tokens, n_predict, {"stream": True, "n_predict": n_predict},
                                      prompt=text)

    def _reload_for(self, num_ctx: Any) -> None:
        """Another context size than the loaded one: Ollama loads the model again before it answers."""
        eng, now = self.sim.engine, self.sim.clock.now()
        if not isinstance(num_ctx, int) or num_ctx <= 0 or num_ctx == eng.slot_ctx(now):
            return
        ep = eng.reload(now, num_ctx * self.sim.scenario.n_parallel, RELOAD_S)
        self._loaded_at[ep.index] = ep.t_ready

    def _stats(self, req: SimRequest) -> dict[str, Any]:
        ns = 1_000_000_000
        prompt_eval_count = req.cache_n + req.prompt_n  # Ollama ≥0.30 counts cached tokens too
        ready = self._loaded_at.get(req.epoch)
        load_s = ready - req.t_arrive if ready is not None and ready > req.t_arrive else 0.002
        return {"done_reason": "length" if req.predicted_n >= req.n_predict else "stop",
                "total_duration": int((req.t_end - req.t_arrive) * ns), "load_duration": int(load_s * ns),
                "prompt_eval_count": prompt_eval_count, "prompt_eval_duration": int(req.prefill_s * ns),
                "eval_count": req.predicted_n, "eval_duration": int(req.predicted_s * ns)}

    def _wall_at(self, t: float) -> float:
        return self.sim.clock.wall() - (self.sim.clock.now() - t)

    def generate(self, body: dict[str, Any], *, chat: bool) -> Reply:
        req = self._submit(body, chat)
        stream = body.get("stream", True) is not False

        def piece(text: str, t: float, done: bool) -> dict[str, Any]:
            obj: dict[str, Any] = {"model": self.name, "created_at": _iso(self._wall_at(t))}
            if chat:
                obj["message"] = {"role": "assistant", "content": text}
            else:
                obj["response"] = text
            obj["done"] = done
            return obj

        def final(text: str) -> bytes:
            obj = piece(text, req.t_end, True) | self._stats(req)
            if not chat:
                obj["context"] = [1, 2, 3]
            return dumps(obj) + b"\n"

        if not stream:
            wait_end(self.sim, req)
            return Reply(200, final(answer_text(req))[:-1])

        def token(k: int) -> bytes:
            return dumps(piece(token_text(req.id_task, k), float(req.token_times[k]), False)) + b"\n"

        def gen() -> Iterator[bytes]:
            yield from tokens_as_they_come(self.sim, req, token)
            if req.aborted_at is not None:
                raise StreamAborted("simulated server restarted")
            yield final("")

        return Reply(200, content_type=NDJSON, stream=gen(), on_abort=lambda: self.sim.engine.cancel(req))

    def v1_chat(self, body: dict[str, Any]) -> Reply:
        req = self._submit(body, chat=True)
        wait_end(self.sim, req)
        prompt = req.cache_n + req.prompt_n
        return json_reply({
            "id": f"chatcmpl-{req.id_task}", "object": "chat.completion", "created": int(self.sim.clock.wall()),
            "model": self.name, "system_fingerprint": "fp_ollama",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer_text(req)},
                         "finish_reason": "length" if req.predicted_n >= req.n_predict else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": req.predicted_n,
                      "total_tokens": prompt + req.predicted_n},
        })
