"""The HTTP API of the simulated vLLM (``kvmon.sim.server.SimServer`` with a ``vllm`` scenario).

Shaped like vLLM's OpenAI-compatible server: ``GET /metrics`` in Prometheus text, written by prometheus_client as
vLLM's is (``vllm/entrypoints/serve/instrumentator/metrics.py``), with the V1 engine's names, help texts, labels
``engine`` and ``model_name`` and histogram buckets (``vllm/v1/metrics/loggers.py``, ``buckets.py``), or, for a
scenario with ``vllm_metric_names="v0"``, the older names without ``engine`` (``gpu_cache_usage_perc``,
``time_per_output_token_seconds``); ``vllm:cache_config_info`` with the cache config as labels; ``GET /v1/models``
one card with ``root`` and ``max_model_len`` (``vllm/entrypoints/openai/models/serving.py``); ``GET /version``;
``GET /health`` an empty 200; ``POST /tokenize``; ``POST /v1/chat/completions`` and ``/v1/completions`` (a text or
token ids, plain or streamed one token per event with ``stream_options.include_usage``) with OpenAI ``usage``. Prefix
caching is on, as in vLLM's V1 engine: whole 16-token blocks of a prompt the last one shared are not computed again.
A prompt and completion past ``max_model_len`` are refused with vLLM's 400; a client that goes away cancels.

The pool is the scenario's ``n_ctx`` tokens in blocks of 16 (vLLM's default ``--block-size``); a running request
holds ceil(tokens / 16) blocks, and usage is held / (blocks − 1), as ``vllm/v1/core/block_pool.py`` counts it. The
model folder vLLM names as ``root`` is written by the simulator as a Hugging Face checkpoint is published: its
``config.json`` and safetensors shards with real headers (every tensor's name, dtype and shape), the data a hole.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from kvmon.core.jsonvals import json_array
from kvmon.sim.files import write_safetensors
from kvmon.sim.reply import Reply, answer_text, dumps, estimate_tokens, json_reply, token_text, tokens_as_they_come
from kvmon.sim.served import ServedSimulation

VERSION = "0.33.0"
BLOCK_SIZE = 16  # vllm/config/cache.py DEFAULT_BLOCK_SIZE
# vllm/v1/metrics/buckets.py
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                           240.0, 480.0, 960.0, 1920.0, 7680.0)
_HF_KEYS = (("block_count", "num_hidden_layers"), ("embedding_length", "hidden_size"),
            ("attention.head_count", "num_attention_heads"), ("attention.head_count_kv", "num_key_value_heads"),
            ("attention.key_length", "head_dim"), ("feed_forward_length", "intermediate_size"),
            ("context_length", "max_position_embeddings"), ("vocab_size", "vocab_size"))
# the GGUF tensor names of a llama-family checkpoint → the names its Hugging Face checkpoint has
# (convert_hf_to_gguf.py's tensor map, read the other way)
_HF_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
_HF_LAYER = {"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
             "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
             "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
             "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
             "attn_v.bias": "self_attn.v_proj.bias", "attn_q_norm.weight": "self_attn.q_norm.weight",
             "attn_k_norm.weight": "self_attn.k_norm.weight", "ffn_gate.weight": "mlp.gate_proj.weight",
             "ffn_up.weight": "mlp.up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight"}
SHARD_BYTES = 4_000_000_000  # the shard size the published Qwen checkpoints are cut at
_TORCH_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}


def hf_name(gguf_name: str) -> str:
    """The Hugging Face name of a llama-family GGUF tensor (``blk.3.attn_q.weight`` → ``model.layers.3.self_attn.
    q_proj.weight``); KeyError for a tensor the map does not know."""
    if gguf_name in _HF_NAMES:
        return _HF_NAMES[gguf_name]
    _blk, layer, rest = gguf_name.split(".", 2)
    return f"model.layers.{layer}.{_HF_LAYER[rest]}"


def write_model_folder(folder: str, metadata: dict[str, Any], tensors: Sequence[Any], dtype: str) -> None:
    """An HF model folder as vLLM reads it: ``config.json`` from the model's GGUF keys, the checkpoint's safetensors
    shards (real headers: names, dtype, shapes outermost first; data a hole) and ``model.safetensors.index.json``."""
    arch = str(metadata["general.architecture"])
    tied = not any(t.name == "output.weight" for t in tensors)
    cfg: dict[str, Any] = {"architectures": [arch.capitalize() + "ForCausalLM"], "model_type": arch,
                           "torch_dtype": _TORCH_DTYPES[dtype], "tie_word_embeddings": tied,
                           "use_sliding_window": False, "sliding_window": None}
    for gguf, hf in _HF_KEYS:
        v = metadata.get(f"{arch}.{gguf}")
        if v is not None:
            cfg[hf] = v
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
    shards: list[list[tuple[str, str, tuple[int, ...]]]] = [[]]
    size = 0
    for t in tensors:
        if size >= SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append((hf_name(t.name), dtype, tuple(reversed(t.shape))))  # torch order: outermost first
        size += t.n_bytes
    weight_map: dict[str, str] = {}
    total = 0
    for i, shard in enumerate(shards, 1):
        name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        total += write_safetensors(os.path.join(folder, name), shard)
        weight_map.update({n: name for n, _d, _s in shard})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


class _Hist:
    """One histogram's buckets, sum and count."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, v: float, n: int = 1) -> None:
        i = next((k for k, b in enumerate(self.bounds) if v <= b), len(self.bounds))
        self.counts[i] += n
        self.sum += v * n

    def buckets(self) -> list[tuple[str, float]]:
        return [("+Inf" if b == math.inf else repr(float(b)), float(acc))
                for b, acc in zip((*self.bounds, math.inf), itertools.accumulate(self.counts), strict=True)]


class VllmApi(Collector):
    """Routes one request of the simulated vLLM; a scrape of /metrics collects its families."""

    def __init__(self, sim: ServedSimulation) -> None:
        self.sim = sim
        self.old_names = sim.scenario.vllm_metric_names == "v0"
        self._lock = threading.Lock()
        self._new_histograms(0)
        self.root = os.path.join(getattr(sim, "files_dir", ""), sim.scenario.model_alias.replace("/", "--"))
        model = sim.engine.model_at(0.0)
        if model.tensors is None:
            raise ValueError(f"the simulated vLLM serves models with a tensor inventory, not {model.preset.key}")
        write_model_folder(self.root, dict(model.preset.metadata), model.tensors, model.quantization)

    def _new_histograms(self, epoch: int) -> None:
        """Empty histograms for the server process ``epoch`` (a restart starts them again, as the counters)."""
        self._epoch = epoch
        self._ttft, self._itl = _Hist(TTFT_BUCKETS), _Hist(ITL_BUCKETS)
        self._prefill_s = _Hist(REQUEST_LATENCY_BUCKETS)
        self._prefill_tokens = _Hist(self._token_buckets())

    def _token_buckets(self) -> tuple[float, ...]:
        """1, 2, 5, 10, 20, 50, ... up to the context limit (vllm/v1/metrics/buckets.py request_tokens)."""
        limit = self.sim.scenario.n_ctx
        return tuple(float(m * 10**exp) for exp in range(16) for m in (1, 2, 5) if m * 10**exp <= limit)

    @property
    def num_gpu_blocks(self) -> int:
        return max(2, self.sim.scenario.n_ctx // BLOCK_SIZE)

    def request_ended(self, r: Any) -> None:
        """A request finished: its first-token time and its steps go into the histograms."""
        if r.aborted_at is not None or not len(r.token_times):
            return
        with self._lock:
            self._ttft.observe(float(r.token_times[0]) - r.t_arrive)
            self._prefill_s.observe(r.prefill_s)
            self._prefill_tokens.observe(r.prompt_n)
            steps = len(r.token_times) - 1
            if steps > 0:
                self._itl.observe((float(r.token_times[-1]) - float(r.token_times[0])) / steps, steps)

    def handle(self, method: str, path: str, query: dict[str, str], body: dict[str, Any] | None) -> Reply:
        if method == "GET" and path == "/health":
            return Reply(200, b"", "application/json")
        if method == "GET" and path == "/metrics":
            return Reply(200, self.metrics_text().encode(), "text/plain; version=0.0.4; charset=utf-8")
        if method == "GET" and path == "/v1/models":
            return json_reply(self.models())
        if method == "GET" and path == "/version":
            return json_reply({"version": VERSION})
        if method == "POST" and path == "/tokenize":
            return self.tokenize(body or {})
        if method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            if body is None:
                return json_reply({"error": {"message": "invalid JSON body", "type": "BadRequestError",
                                             "code": 400}}, 400)
            return self.complete(body, chat=path.endswith("chat/completions"))
        return json_reply({"detail": "Not Found"}, 404)

    def models(self) -> dict[str, Any]:
        now = self.sim.clock.now()
        created = int(self.sim.clock.wall())
        name = self.sim.scenario.model_alias
        return {"object": "list", "data": [{
            "id": name, "object": "model", "created": created, "owned_by": "vllm", "root": self.root,
            "parent": None, "max_model_len": self.sim.engine.slot_ctx(now),
            "permission": [{"id": "modelperm-sim", "object": "model_permission", "created": created,
                            "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                            "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
                            "organization": "*", "group": None, "is_blocking": False}]}]}

    # -- /metrics -------------------------------------------------------------------------------------
    def values(self, now: float) -> dict[str, float]:
        """The engine's numbers at ``now``: step counters, requests, blocks in use."""
        eng = self.sim.engine
        with eng.lock:
            eng.advance(now)
            ep = eng.epoch_at(now)
            live = eng.live_requests(now)
            c = ep.counters
            running = [r for r in live if r.is_processing(now)]
            held = sum(math.ceil(r.context_tokens(now) / BLOCK_SIZE) for r in running)
            return {
                "prompt_tokens": c["prompt_tokens_total"] + sum(r.prompt_processed(now) for r in live),
                "generation_tokens": c["tokens_predicted_total"] + sum(r.n_decoded(now) for r in live),
                "running": float(len(running)),
                "waiting": float(sum(1 for r in live if r.is_deferred(now))),
                "usage": min(1.0, held / (self.num_gpu_blocks - 1)),
                # the prefix cache, in tokens: every prompt token looked up, and those found (whole blocks)
                "prefix_queries": c["prompt_tokens_total"] + c["prompt_tokens_cached_total"],
                "prefix_hits": c["prompt_tokens_cached_total"],
                "epoch": float(ep.index),
            }

    def metrics_text(self) -> str:
        """The /metrics page, rendered by prometheus_client as vLLM's own is."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        return generate_latest(registry).decode()

    def collect(self) -> Iterator[Metric]:
        yield from self.families(self.sim.clock.now())

    def families(self, now: float) -> list[Metric]:
        v = self.values(now)
        with self._lock:
            if int(v["epoch"]) != self._epoch:  # a restart
                self._new_histograms(int(v["epoch"]))
            ttft, itl, pre_s, pre_n = self._ttft, self._itl, self._prefill_s, self._prefill_tokens
        name = self.sim.scenario.model_alias
        labels = ["model_name"] if self.old_names else ["engine", "model_name"]
        lv = [name] if self.old_names else ["0", name]

        def gauge(n: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(f"vllm:{n}", doc, labels=labels)
            g.add_metric(lv, value)
            return g

        def counter(n: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(f"vllm:{n}", doc, labels=labels)
            c.add_metric(lv, value)
            return c

        def hist(n: str, doc: str, h: _Hist) -> HistogramMetricFamily:
            fam = HistogramMetricFamily(f"vllm:{n}", doc, labels=labels)
            fam.add_metric(lv, h.buckets(), h.sum)
            return fam

        usage = "gpu_cache_usage_perc" if self.old_names else "kv_cache_usage_perc"
        itl_name = "time_per_output_token_seconds" if self.old_names else "inter_token_latency_seconds"
        out: list[Metric] = [
            gauge("num_requests_running", "Number of requests in model execution batches.", v["running"]),
            gauge("num_requests_waiting", "Number of requests waiting to be processed.", v["waiting"]),
            gauge(usage, "KV-cache usage. 1 means 100 percent usage.", v["usage"]),
            counter("num_preemptions", "Cumulative number of preemption from the engine.", 0.0),
            counter("prompt_tokens", "Number of prefill tokens processed.", v["prompt_tokens"]),
            counter("generation_tokens", "Number of generation tokens processed.", v["generation_tokens"]),
            counter("prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
                    v["prefix_queries"]),
            counter("prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", v["prefix_hits"]),
            hist("time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttft),
            hist(itl_name, "Histogram of inter-token latency in seconds.", itl),
        ]
        if not self.old_names:
            sleep = GaugeMetricFamily("vllm:engine_sleep_state", "Engine sleep state; awake = 0 means engine is "
                                      "sleeping; awake = 1 means engine is awake; weights_offloaded = 1 means sleep "
                                      "level 1; discard_all = 1 means sleep level 2.",
                                      labels=[*labels, "sleep_state"])
            for state, level in (("awake", 1.0), ("weights_offloaded", 0.0), ("discard_all", 0.0)):
                sleep.add_metric([*lv, state], level)
            out.append(sleep)
            out += [hist("request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
                         pre_s),
                    hist("request_prefill_kv_computed_tokens", "Histogram of new KV tokens computed during prefill "
                         "(excluding cached tokens).", pre_n)]
        info = GaugeMetricFamily("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                                 labels=["block_size", "cache_dtype", "enable_prefix_caching", "engine",
                                         "gpu_memory_utilization", "kv_cache_size_tokens", "num_cpu_blocks",
                                         "num_gpu_blocks"])
        info.add_metric([str(BLOCK_SIZE), "auto", "True", "0", "0.92", str(self.num_gpu_blocks * BLOCK_SIZE),
                         "None", str(self.num_gpu_blocks)], 1.0)
        out.append(info)
        return out

    # -- requests -------------------------------------------------------------------------------------
    def _ids(self, text: str) -> list[int]:
        """A text's token ids: one per four characters, as the simulator counts a text's tokens."""
        vocab = int(self.sim.engine.model_at(self.sim.clock.now()).shape.vocab_size or 151936)
        return [3 + sum(map(ord, text[i:i + 4])) * 7919 % (vocab - 3) for i in range(0, len(text) // 4 * 4, 4)] \
            or ([3] if text else [])

    def tokenize(self, body: dict[str, Any]) -> Reply:
        """vLLM's ``/tokenize``: the prompt's token ids, their count and the model's limit."""
        ids = self._ids(str(body.get("prompt", "")))
        return json_reply({"count": len(ids), "max_model_len": self.sim.engine.slot_ctx(self.sim.clock.now()),
                           "tokens": ids, "token_strs": None})

    def _too_long(self, prompt: int, n_predict: int) -> Reply | None:
        limit = self.sim.engine.slot_ctx(self.sim.clock.now())  # max_model_len
        if prompt + n_predict <= limit:
            return None
        return json_reply({"object": "error", "message": (
            f"This model's maximum context length is {limit} tokens. However, you requested {prompt + n_predict} "
            f"tokens ({prompt} in the messages, {n_predict} in the completion). Please reduce the length of the "
            "messages or completion."), "type": "BadRequestError", "param": None, "code": 400}, 400)

    def complete(self, body: dict[str, Any], *, chat: bool) -> Reply:
        ids: list[int] | None = None
        if chat:
            msgs = json_array(body.get("messages"))
            text = " ".join(str(m.get("content", "")) for m in msgs if isinstance(m, dict))
        elif isinstance(body.get("prompt"), list) and all(isinstance(t, int) for t in body["prompt"]):
            ids, text = list(body["prompt"]), ""
        else:
            text = str(body.get("prompt", ""))
        prompt = len(ids) if ids else max(1, estimate_tokens(text))
        n_predict = int(body.get("max_tokens") or 64)
        too_long = self._too_long(prompt, n_predict)
        if too_long is not None:
            return too_long
        key = ids if ids is not None else self._ids(text)
        cached = key[:len(key) // BLOCK_SIZE * BLOCK_SIZE]  # prefix caching keeps whole blocks
        req = self.sim.engine.submit(prompt, n_predict, {"stream": bool(body.get("stream"))}, prompt=cached or None)
        if body.get("stream"):
            return self._stream(req, body, chat)
        self.sim.clock.sleep_until(req.t_end, self.sim.stopping)
        content = answer_text(req)
        choice: dict[str, Any] = ({"index": 0, "message": {"role": "assistant", "content": content},
                                   "finish_reason": "length"} if chat
                                  else {"index": 0, "text": content, "finish_reason": "length"})
        return json_reply({"id": f"cmpl-{req.id_task}", "object": "chat.completion" if chat else "text_completion",
                           "created": int(time.time()), "model": self.sim.scenario.model_alias, "choices": [choice],
                           "usage": {"prompt_tokens": req.prompt_n + req.cache_n,
                                     "completion_tokens": req.predicted_n,
                                     "total_tokens": req.prompt_n + req.cache_n + req.predicted_n}})


    def _stream(self, req: Any, body: dict[str, Any], chat: bool) -> Reply:
        """Server-sent events, one per token as vLLM sends them, then the usage (when asked for) and [DONE]."""
        head = {"id": f"cmpl-{req.id_task}", "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(self.sim.clock.wall()), "model": self.sim.scenario.model_alias}
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            return b"data: " + dumps({**head, "choices": choices, **extra}) + b"\n\n"

        def token(k: int) -> bytes:
            done = "length" if k == req.predicted_n - 1 else None
            text = token_text(req.id_task, k)
            choice = ({"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": done} if chat else
                      {"index": 0, "text": text, "logprobs": None, "finish_reason": done, "stop_reason": None})
            return event([choice], **({"usage": None} if with_usage else {}))

        def gen() -> Iterator[bytes]:
            yield from tokens_as_they_come(self.sim, req, token)
            if with_usage:
                yield event([], usage={"prompt_tokens": req.prompt_n + req.cache_n,
                                       "total_tokens": req.prompt_n + req.cache_n + req.predicted_n,
                                       "completion_tokens": req.predicted_n})
            yield b"data: [DONE]\n\n"

        return Reply(200, content_type="text/event-stream; charset=utf-8", stream=gen(),
                     on_abort=lambda: self.sim.engine.cancel(req))
