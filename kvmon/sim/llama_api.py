"""The llama-server HTTP API of the simulator, shaped like the real server's answers (build b11549).

Endpoints: /health, /v1/health, /props (GET, POST), /slots, /metrics, /v1/models, /models, /tokenize, /completion
(a text or a token array, ``cache_prompt``, ``id_slot``), /v1/chat/completions (plain and SSE with timings). Keys,
key order, types, headers and error bodies follow real captures; the numbers come from the simulation. A prompt as
long as the slot's context is refused as the real server refuses it; a client that goes away cancels its request.
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Callable, Iterator
from typing import Any

from kvmon.sim.reply import (
    Reply,
    StreamAborted,
    answer_text,
    chat_text,
    dumps,
    estimate_tokens,
    json_reply,
    token_text,
    tokens_as_they_come,
    wait_end,
)
from kvmon.sim.requests import SimRequest
from kvmon.sim.served import ServedSimulation

BUILD_INFO = "b11549-unknown"
FTYPES = {"Q4_K_M": "Q4_K - Medium", "Q4_K_S": "Q4_K - Small", "Q5_K_M": "Q5_K - Medium", "Q6_K": "Q6_K",
          "Q8_0": "Q8_0", "F16": "F16", "BF16": "BF16", "MXFP4": "MXFP4 MoE", "Q4_0": "Q4_0"}
SAMPLERS = ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"]


def error_body(code: int, message: str, kind: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "type": kind}}


LOADING = {"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}}
BAD_KEY = {"error": {"message": "Invalid API Key", "type": "authentication_error", "code": 401}}
NOT_FOUND = {"error": {"message": "File Not Found", "type": "not_found_error", "code": 404}}


def gen_params(n_predict: int = -1, *, stream: bool = False, seed: int = 4294967295) -> dict[str, Any]:
    """The sampling parameters block of /props, /slots and responses."""
    return {
        "seed": seed, "temperature": 0.800000011920929, "dynatemp_range": 0.0, "dynatemp_exponent": 1.0,
        "top_k": 40, "top_p": 0.949999988079071, "min_p": 0.05000000074505806, "top_n_sigma": -1.0,
        "xtc_probability": 0.0, "xtc_threshold": 0.10000000149011612, "typical_p": 1.0, "repeat_last_n": 64,
        "repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "dry_multiplier": 0.0,
        "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": 64, "mirostat": 0, "mirostat_tau": 5.0,
        "mirostat_eta": 0.10000000149011612, "adaptive_target": -1.0, "adaptive_decay": 0.8999999761581421,
        "max_tokens": n_predict, "n_predict": n_predict, "n_keep": 0, "n_discard": 0, "ignore_eos": False,
        "stream": stream, "n_probs": 0, "min_keep": 0, "chat_format": "Content-only", "reasoning_format": "none",
        "reasoning_in_content": False, "generation_prompt": "", "samplers": list(SAMPLERS),
        "speculative.types": "none", "timings_per_token": False, "post_sampling_probs": False,
        "backend_sampling": False, "lora": [],
    }


def response_settings(n_predict: int, *, stream: bool, seed: int) -> dict[str, Any]:
    """The ``generation_settings`` of a finished request: the params plus stop/grammar fields."""
    out: dict[str, Any] = {}
    for k, v in gen_params(n_predict, stream=stream, seed=seed).items():
        if k == "max_tokens":
            out["stop"] = []
        out[k] = v
        if k == "dry_penalty_last_n":
            out["dry_sequence_breakers"] = ["\n", ":", "\"", "*"]
        elif k == "stream":
            out["logit_bias"] = []
        elif k == "min_keep":
            out.update({"grammar": "", "grammar_lazy": False, "grammar_triggers": [], "preserved_tokens": []})
    return out


class LlamaApi:
    """Routes one request of the simulated llama-server to its answer."""

    def __init__(self, sim: ServedSimulation) -> None:
        self.sim = sim
        self.media_marker = "<__media_" + "".join(secrets.choice(string.ascii_letters + string.digits)
                                                for _ in range(32)) + "__>"

    # -- helpers --------------------------------------------------------------------------------------
    @property
    def model_name(self) -> str:
        """What the server calls its model: a real llama-server started without --alias says its -m path."""
        return self.sim.model_path

    def _ftype(self) -> str:
        quant = self.sim.engine.model_at(0.0).quantization.upper()
        return FTYPES.get(quant, quant or "unknown")

    def handle(self, method: str, path: str, query: dict[str, str], body: dict[str, Any] | None) -> Reply:
        """Answer one request (faults, loading and auth were dealt with by the server)."""
        routes: dict[tuple[str, str], Callable[[], Reply]] = {
            ("GET", "/health"): self.health, ("GET", "/v1/health"): self.health,
            ("GET", "/props"): self.props, ("POST", "/props"): lambda: json_reply({"success": True}),
            ("GET", "/slots"): lambda: self.slots(query), ("GET", "/metrics"): self.metrics,
            ("GET", "/v1/models"): self.models, ("GET", "/models"): self.models,
            ("POST", "/tokenize"): lambda: self.tokenize(body or {}),
            ("POST", "/completion"): lambda: self.completion(body or {}),
            ("POST", "/completions"): lambda: self.completion(body or {}),
            ("POST", "/v1/chat/completions"): lambda: self.chat(body or {}),
            ("POST", "/chat/completions"): lambda: self.chat(body or {}),
        }
        fn = routes.get((method, path))
        if fn is None:
            return json_reply(NOT_FOUND, 404)
        if body is None and method == "POST":
            return json_reply(error_body(400, "Failed to parse the request body as JSON", "invalid_request_error"), 400)
        return fn()

    # -- read-only endpoints --------------------------------------------------------------------------
    def health(self) -> Reply:
        return json_reply({"status": "ok"})

    def props(self) -> Reply:
        n_ctx = self.sim.engine.slot_ctx(self.sim.clock.now())
        body = {
            "default_generation_settings": {"params": gen_params(), "n_ctx": n_ctx},
            "total_slots": self.sim.scenario.n_parallel, "model_alias": self.model_name, "model_ftype": self._ftype(),
            "model_path": self.sim.model_path, "modalities": {"vision": False, "video": False, "audio": False},
            "media_marker": self.media_marker, "endpoint_slots": True, "endpoint_props": True,
            "endpoint_metrics": True, "ui": True, "ui_settings": {},
            "chat_template": "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
            "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}"
            "{{ '<|im_start|>assistant\\n' }}{% endif %}",
            "chat_template_caps": {"supports_object_arguments": False, "supports_parallel_tool_calls": False,
                                   "supports_preserve_reasoning": False, "supports_reasoning_effort": False,
                                   "supports_string_content": True, "supports_system_role": True,
                                   "supports_tool_calls": False, "supports_tools": False,
                                   "supports_typed_content": False},
            "bos_token": "<s>", "eos_token": "</s>", "build_info": BUILD_INFO,
            "is_sleeping": bool(getattr(self.sim, "sleeping", False)),
            "cors_proxy_enabled": False,
        }
        return json_reply(body)

    def slots(self, query: dict[str, str]) -> Reply:
        eng = self.sim.engine
        with eng.lock:
            eng.note_task()
            now = self.sim.clock.now()
            eng.advance(now)
            out: list[dict[str, Any]] = []
            for i in range(self.sim.scenario.n_parallel):
                req = eng.slot_request(i, now)
                entry: dict[str, Any] = {"id": i, "n_ctx": eng.slot_ctx(now), "speculative": False,
                                         "is_processing": bool(req and req.is_processing(now))}
                if req is not None:
                    # a finished slot keeps its tokens but shows its per-request counters reset, as the real one
                    processing = req.is_processing(now)
                    decoded = req.n_decoded(now) if processing else 0
                    entry.update({
                        "id_task": req.id_task, "n_prompt_tokens": req.context_tokens(now),
                        "n_prompt_tokens_processed": req.prompt_processed(now) if processing else 0,
                        "n_prompt_tokens_cache": req.cache_n if processing else 0,
                        "params": gen_params(req.n_predict, stream=bool(req.params.get("stream")), seed=req.id_task),
                        "next_token": [{"has_next_token": processing, "has_new_line": False,
                                        "n_remain": (req.n_predict - decoded)
                                        if processing and req.n_predict > 0 else -1,
                                        "n_decoded": decoded}],
                    })
                out.append(entry)
        if query.get("fail_on_no_slot") not in (None, "", "0", "false") and all(e["is_processing"] for e in out):
            return json_reply(error_body(503, "no slot available", "unavailable_error"), 503)
        return json_reply(out)

    def metrics(self) -> Reply:
        eng = self.sim.engine
        eng.note_task()
        now = self.sim.clock.now()
        m = eng.metrics(now)
        lines: list[str] = []
        for name, kind, help_text in METRICS:
            value = m.get(name, 0.0)
            text = str(int(value)) if float(value).is_integer() else f"{value:g}"
            lines += [f"# HELP llamacpp:{name} {help_text}", f"# TYPE llamacpp:{name} {kind}",
                      f"llamacpp:{name} {text}"]
        body = ("\n".join(lines) + "\n").encode()
        start_us = eng.epoch_at(now).start_time_us
        return Reply(200, body, "text/plain; version=0.0.4", {"Process-Start-Time-Unix": str(start_us)})

    def models(self) -> Reply:
        eng = self.sim.engine
        model = eng.model_at(self.sim.clock.now())
        md = model.preset.metadata
        arch = md.get("general.architecture", "")
        name = self.model_name
        n_params = int(model.n_params or model.weight_bytes * 8 / 4.85)
        body = {
            "models": [{"name": name, "model": name, "modified_at": "", "size": "", "digest": "", "type": "model",
                        "description": "", "tags": [""], "capabilities": ["completion"], "parameters": "",
                        "details": {"parent_model": "", "format": "gguf", "family": "", "families": [""],
                                    "parameter_size": "", "quantization_level": ""}}],
            "object": "list",
            "data": [{"id": name, "aliases": [name], "tags": [], "object": "model",
                      "architecture": {"input_modalities": ["text"], "output_modalities": ["text"]},
                      "created": int(self.sim.clock.wall()), "owned_by": "llamacpp",
                      "meta": {"vocab_type": 2, "n_vocab": int(model.shape.vocab_size or 32000),
                               "n_ctx": eng.slot_ctx(self.sim.clock.now()),
                               "n_ctx_train": int(md.get(f"{arch}.context_length") or model.shape.n_ctx_train or 0),
                               "n_embd": model.shape.n_embd, "n_params": n_params, "size": model.weight_bytes,
                               "ftype": self._ftype()}}],
        }
        return json_reply(body)

    # -- generation -----------------------------------------------------------------------------------
    def _n_vocab(self) -> int:
        return int(self.sim.engine.model_at(self.sim.clock.now()).shape.vocab_size or 32000)

    def tokenize(self, body: dict[str, Any]) -> Reply:
        """The content's tokens: about four characters each, as the simulator counts a text's tokens."""
        content = body.get("content")
        text = content if isinstance(content, str) else ""
        vocab = self._n_vocab()
        pieces = [text[i:i + 4] for i in range(0, len(text) // 4 * 4, 4)] or ([text] if text else [])
        return json_reply({"tokens": [3 + sum(map(ord, p)) * 7919 % (vocab - 3) for p in pieces]})

    def _submit(self, prompt_tokens: int, body: dict[str, Any], stream: bool,
                prompt: list[int] | str | None = None) -> SimRequest:
        n_predict = body.get("n_predict", body.get("max_tokens", body.get("max_completion_tokens")))
        if n_predict == 0:  # the real server still samples one token
            n_predict = 1
        if not isinstance(n_predict, int) or n_predict <= 0:
            n_predict = 128
        slot = body.get("id_slot")
        cached = prompt if body.get("cache_prompt", True) is not False else None
        return self.sim.engine.submit(prompt_tokens, n_predict, {"stream": stream, "n_predict": n_predict},
                                      prompt=cached, slot=slot if isinstance(slot, int) and slot >= 0 else None)

    def _tokens(self, req: SimRequest, make: Callable[[int], bytes]) -> Iterator[bytes]:
        """Yield chunks as the simulated tokens appear (empty ones while it waits: the server looks whether its
        client is still there); StreamAborted if the server died meanwhile."""
        yield from tokens_as_they_come(self.sim, req, make)
        if req.aborted_at is not None:
            self.sim.clock.sleep_until(req.aborted_at, self.sim.stopping)
            raise StreamAborted("simulated server restarted")

    def _prompt_tokens(self, prompt: Any) -> tuple[int, list[int] | str] | Reply:
        """(tokens, the prompt as the cache compares it) of a text or token-array prompt, or the real server's 400."""
        key: list[int] | str
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            if any(t < 0 or t >= self._n_vocab() for t in prompt):
                return json_reply(error_body(400, "Prompt contains invalid tokens", "invalid_request_error"), 400)
            tokens, key = len(prompt), list(prompt)
        else:
            text = prompt if isinstance(prompt, str) else str(prompt)
            tokens, key = estimate_tokens(text), text
        n_ctx = self.sim.engine.slot_ctx(self.sim.clock.now())
        if tokens >= n_ctx:
            body = error_body(400, f"request ({tokens} tokens) exceeds the available context size ({n_ctx} tokens), "
                                   "try increasing it", "exceed_context_size_error")
            body["error"].update({"n_prompt_tokens": tokens, "n_ctx": n_ctx})
            return json_reply(body, 400)
        return tokens, key

    def completion(self, body: dict[str, Any]) -> Reply:
        prompt = body.get("prompt", "")
        stream = bool(body.get("stream"))
        got = self._prompt_tokens(prompt)
        if isinstance(got, Reply):
            return got
        req = self._submit(got[0], body, stream, got[1])
        text = answer_text(req)

        def final(content: str) -> dict[str, Any]:
            stop_type = "limit" if req.predicted_n >= req.n_predict else "eos"
            return {"index": 0, "content": content, "tokens": [], "id_slot": req.slot, "stop": True,
                    "model": self.model_name, "tokens_predicted": req.predicted_n,
                    "tokens_evaluated": req.cache_n + req.prompt_n,
                    "generation_settings": response_settings(req.n_predict, stream=stream, seed=req.id_task),
                    "prompt": prompt if isinstance(prompt, str) else "", "has_new_line": "\n" in content,
                    "truncated": False, "stop_type": stop_type, "stopping_word": "",
                    "tokens_cached": req.cache_n + req.prompt_n + req.predicted_n, "timings": req.timings()}

        if not stream:
            wait_end(self.sim, req)
            return json_reply(final(text))

        def chunk(k: int) -> bytes:
            return b"data: " + dumps({"index": 0, "content": token_text(req.id_task, k), "tokens": [100 + k % 400],
                                      "stop": False, "id_slot": -1, "tokens_predicted": k + 1,
                                      "tokens_evaluated": req.cache_n + req.prompt_n}) + b"\n\n"

        def gen() -> Iterator[bytes]:
            yield from self._tokens(req, chunk)
            yield b"data: " + dumps(final("")) + b"\n\n"

        return Reply(200, content_type="text/event-stream", headers={"X-Accel-Buffering": "no"}, stream=gen(),
                     on_abort=lambda: self.sim.engine.cancel(req))

    def chat(self, body: dict[str, Any]) -> Reply:
        stream = bool(body.get("stream"))
        got = self._prompt_tokens(chat_text(body))
        if isinstance(got, Reply):
            return got
        req = self._submit(got[0], body, stream, got[1])
        cid = "chatcmpl-" + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(32))
        created = int(self.sim.clock.wall())
        finish = "length" if req.predicted_n >= req.n_predict else "stop"
        usage = {"completion_tokens": req.predicted_n, "prompt_tokens": req.cache_n + req.prompt_n,
                 "total_tokens": req.cache_n + req.prompt_n + req.predicted_n,
                 "prompt_tokens_details": {"cached_tokens": req.cache_n}}
        head = {"created": created, "id": cid, "model": self.model_name, "system_fingerprint": BUILD_INFO}
        if not stream:
            wait_end(self.sim, req)
            return json_reply({"choices": [{"finish_reason": finish, "index": 0,
                                            "message": {"role": "assistant", "content": answer_text(req)}}],
                               "created": created, "model": self.model_name, "system_fingerprint": BUILD_INFO,
                               "object": "chat.completion", "usage": usage, "id": cid, "timings": req.timings()})

        def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            return b"data: " + dumps({"choices": choices, **head, "object": "chat.completion.chunk", **extra}) + b"\n\n"

        def chunk(k: int) -> bytes:
            return event([{"finish_reason": None, "index": 0, "delta": {"content": token_text(req.id_task, k)}}])

        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def gen() -> Iterator[bytes]:
            yield event([{"finish_reason": None, "index": 0, "delta": {"role": "assistant", "content": None}}])
            yield from self._tokens(req, chunk)
            if include_usage:
                yield event([{"finish_reason": finish, "index": 0, "delta": {}}])
                yield event([], usage=usage, timings=req.timings())
            else:
                yield event([{"finish_reason": finish, "index": 0, "delta": {}}], timings=req.timings())
            yield b"data: [DONE]\n\n"

        return Reply(200, content_type="text/event-stream", headers={"X-Accel-Buffering": "no"}, stream=gen())


METRICS: tuple[tuple[str, str, str], ...] = (
    ("prompt_tokens_total", "counter", "Number of prompt tokens processed, excluding cached tokens"),
    ("prompt_tokens_cached_total", "counter", "Number of prompt tokens reused from the cache"),
    ("prompt_seconds_total", "counter", "Total time spent processing prompts"),
    ("tokens_predicted_total", "counter", "Number of generation tokens processed"),
    ("tokens_predicted_seconds_total", "counter", "Total time spent generating tokens"),
    ("n_decode_total", "counter",
     "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding"),
    ("n_tokens_max", "counter", "Largest observed sequence length (prompt + generation)"),
    ("spec_decode_num_draft_tokens_total", "counter", "Speculative: Total draft tokens generated"),
    ("spec_decode_num_accepted_tokens_total", "counter",
     "Speculative: Total draft tokens accepted by the target model"),
    ("spec_decode_num_drafts_total", "counter", "Speculative: Total speculative decoding verification steps"),
    ("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s"),
    ("predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s"),
    ("requests_processing", "gauge", "Number of requests processing"),
    ("requests_deferred", "gauge", "Number of requests deferred"),
    ("n_busy_slots_per_decode", "gauge", "Average number of busy slots per llama_decode() call"),
)
