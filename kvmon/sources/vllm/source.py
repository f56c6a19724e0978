"""vLLM: one poll of ``/metrics`` (always on) and, every 30 s, ``/v1/models`` and ``/version``, as a ServerReading.

vLLM keeps one pool of KV blocks for all requests (paged attention), so the reading says what the pool holds, not
per-conversation slots: capacity from ``vllm:cache_config_info`` (``kv_cache_size_tokens``, else ``num_gpu_blocks``
× ``block_size``), the fraction in use from ``vllm:kv_cache_usage_perc``, the running and waiting requests, and
the step counters ``prompt_tokens_total`` / ``generation_tokens_total`` that the rate tracker turns into live
prefill and decode speeds. Bytes per token come from the model's shape (``kvmon.sources.hf_config`` for the HF
folder vLLM names as the model's ``root``, or the GGUF file it serves) and the cache dtype; vLLM's page for a
full-attention layer is 2 × KV heads × head size × dtype bytes per token (``vllm/v1/kv_cache_interface.py``), so
the pool is capacity × that. The weights are the checkpoint's, summed from its safetensors headers (never its data);
without them, its parameter count and dtype let the analysis estimate them. Without a readable model folder those
bytes are unknown, and say why.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from kvmon.core.jsonvals import json_str
from kvmon.core.readings import (
    ACCEPTED_PER_POSITION,
    FailureKind,
    ModelInfo,
    Provenance,
    ServerConfig,
    ServerReading,
    SourceError,
    SourceFailure,
    position_counter,
)
from kvmon.core.sanitize import plain_text
from kvmon.physics import kv as kv_mod
from kvmon.sources import procs
from kvmon.sources.hf_config import DTYPES, HfModel, model_folder, read_model
from kvmon.sources.http import HttpClient, decode_json, normalize_base_url, raise_for_status
from kvmon.sources.model_file import ModelFiles
from kvmon.sources.vllm import VLLM
from kvmon.sources.vllm.parse import MetricsPage, ModelCard, ModelMetrics, parse_metrics, parse_models

BACKEND = VLLM
DEFAULT_PORT = VLLM.ports[0]
CARDS_EVERY_S = 30.0  # the served models change only on a restart
# --kv-cache-dtype: torch's names as in config.json (vllm/utils/torch_utils.py STR_DTYPE_TO_TORCH_DTYPE); fp8 and int8
# variants keep one byte per value
ONE_BYTE_PREFIXES = ("fp8", "int8", "nvfp4", "turboquant")


def kv_type_of(cache_dtype: str | None, model_dtype: str | None) -> tuple[str | None, str | None]:
    """(kvmon cache-type name, why unknown) for vLLM's ``cache_dtype`` (``auto`` = the model's own dtype)."""
    if cache_dtype is None or cache_dtype == "None":
        return None, "vllm:cache_config_info gives no cache_dtype"
    d = cache_dtype.strip().lower()
    if d == "auto":
        if model_dtype is None:
            return None, "cache_dtype is auto (the model's dtype), and the model's config.json is not readable here"
        return model_dtype, None
    if d.startswith(ONE_BYTE_PREFIXES):
        return "fp8", None
    if d in DTYPES:
        return DTYPES[d], None
    return None, f"cache_dtype {cache_dtype!r} is not one kvmon can size"


class VllmSource:
    """A vLLM OpenAI-compatible server: ``/metrics`` every poll, model cards and version every 30 s."""

    backend = BACKEND

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout_s: float = 3.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.base_url = normalize_base_url(base_url, DEFAULT_PORT)
        self._http = HttpClient(self.base_url, api_key=api_key, timeout_s=timeout_s)
        self.display_url = self._http.display_url
        self._clock = clock
        parts = urlsplit(self.base_url)
        self._local = procs.is_local_host(parts.hostname or "")
        self._port = parts.port or DEFAULT_PORT
        self._cards_at: float | None = None
        self._cards: list[ModelCard] = []
        self._card_notes: list[str] = []
        self._version: str | None = None
        self._models: dict[str, tuple[HfModel | None, Any, str | None]] = {}  # root → (hf model, gguf header, why)
        self._files = ModelFiles()
        self._pids: tuple[float, tuple[int, ...]] | None = None

    def __repr__(self) -> str:
        return f"VllmSource({self.display_url!r})"

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------------ requests

    def _metrics(self) -> MetricsPage:
        """``/metrics``, the one page vLLM's reading comes from: one with no ``vllm:`` series (a gateway's HTML page,
        an empty body) is no reading of vLLM, so the poll fails naming what came instead."""
        resp = self._http.get("/metrics")
        raise_for_status(resp, "/metrics", self.display_url)
        page = parse_metrics(resp.text)
        if not page.has_vllm:
            head = resp.body[:60].decode("utf-8", "replace").strip()
            what = ("an empty body" if not head else "an HTML page" if head.lower().startswith(("<!doctype", "<html"))
                    else f"{plain_text(head)!r}")
            raise SourceError(SourceFailure(FailureKind.UNEXPECTED_BODY, f"{self.display_url}/metrics has no vLLM "
                                            f"series (got {what}, {len(resp.body)} bytes)", "/metrics",
                                            resp.status_code))
        return page

    def _refresh_cards(self, now: float) -> None:
        if self._cards_at is not None and 0.0 <= now - self._cards_at < CARDS_EVERY_S:
            return
        self._cards_at = now
        try:
            self._cards, self._card_notes = parse_models(self._http.get_json("/v1/models"))
        except SourceError as e:
            self._cards, self._card_notes = [], [f"/v1/models: {e.failure.reason}"]
        try:
            v = decode_json(self._http.get("/version"), "/version")
            self._version = json_str(v.get("version")) if isinstance(v, Mapping) else None
        except SourceError as e:
            self._version = None
            self._card_notes = [*self._card_notes, f"version unknown: {e.failure.reason}"]

    def _server_pids(self, now: float) -> tuple[int, ...]:
        """The process listening on the port (vLLM's engine processes are its children), when it runs here."""
        if not self._local:
            return ()
        if self._pids is None or not 0.0 <= now - self._pids[0] < 10.0:
            proc = procs.find_listening_process(self._port)
            self._pids = (now, (proc.pid,) if proc is not None else ())
        return self._pids[1]

    # ------------------------------------------------------------------ the model's shape

    def _model_files(self, root: str | None) -> tuple[HfModel | None, Any, str | None]:
        """(HF folder's model, GGUF header, why neither) for the card's ``root``; read once per root."""
        key = root or ""
        if key in self._models:
            return self._models[key]
        found: tuple[HfModel | None, Any, str | None]
        if not key:
            found = (None, None, "vLLM gives no model path (root) in /v1/models")
        elif not self._local:
            found = (None, None, "the server runs on another machine: its model folder is not readable here")
        elif key.lower().endswith(".gguf"):
            header, why, _ = self._files.header(key)
            found = (None, header, why)
        else:
            folder = model_folder(key)
            found = (read_model(folder), None, None) if folder else (
                None, None, f"model folder {os.path.basename(key.rstrip('/')) or key!r} not found on this machine "
                "(nor in the local Hugging Face cache)")
        self._models[key] = found
        return found

    # ------------------------------------------------------------------ one poll

    def poll(self) -> ServerReading:
        """Read ``/metrics`` (raises SourceError when it cannot be read) and the model cards when due."""
        page = self._metrics()
        t, t_wall = self._clock(), time.time()
        self._refresh_cards(t)
        reasons: dict[str, str] = {}
        notes = list(page.notes) + self._card_notes
        card = self._cards[0] if self._cards else None
        name = card.id if card else next(iter(page.models), None)
        mm = page.models.get(name or "") or ModelMetrics(name or "")
        if name and name not in page.models:
            reasons["metrics"] = f"/metrics has no series for model {name!r} yet"
        hf, header, why = self._model_files(card.root if card else None)
        shape = None
        weight_bytes = None
        arch = None
        n_params = storage = None
        model_dtype = hf.dtype if hf else None
        if hf is not None:
            arch = hf.arch
            if hf.metadata is not None:
                shape, why = self._files.shape(hf.metadata, None)
            else:
                why = hf.why_not
            # the checkpoint's own size from its headers; else its parameters and dtype, for the analysis's estimate
            weight_bytes, n_params, storage = hf.weight_bytes, hf.n_params, hf.storage
            reasons["weight_bytes"] = hf.weights_note or f"weights not read: {hf.weights_why}"
        elif header is not None:
            shape, why = self._files.shape(header.metadata, None)
            weight_bytes = header.tensor_bytes
            arch = json_str(header.metadata.get("general.architecture"))
        if shape is None:
            reasons["model_shape"] = why or "model shape unknown"
        config = self._config(page, card, shape, model_dtype, reasons)
        model = ModelInfo(name=name, arch=arch or getattr(shape, "arch", None), weight_bytes=weight_bytes,
                          n_params=n_params, quantization=storage, n_ctx_train=getattr(shape, "n_ctx_train", None),
                          path=(plain_text(card.root) if card and card.root else None), shape=shape,
                          shape_source=("hf_config" if hf is not None and shape is not None
                                        else "gguf" if shape is not None else None))
        if notes:
            reasons["server"] = "; ".join(notes)
        running = mm.requests_running
        state = "ok"
        if mm.awake is False:  # sleep mode (level 1: weights offloaded, level 2: discarded); /metrics still answers
            state = "sleeping"
            reasons["state"] = "the vLLM engine is asleep (sleep mode): no model in GPU memory until it is woken"
        return ServerReading(
            t_monotonic=t, t_wall=t_wall, backend=BACKEND, url=self.display_url, server_version=self._version,
            state=state,
            model=model, metrics_enabled=True, metrics=_counters(mm), config=config,
            live_rate_source="metrics", kv_in_use_fraction=mm.kv_usage_fraction,
            requests_running=int(running) if running is not None else None,
            requests_waiting=int(mm.requests_waiting) if mm.requests_waiting is not None else None,
            server_pids=self._server_pids(t), reasons=reasons)

    def _config(self, page: MetricsPage, card: ModelCard | None, shape: Any, model_dtype: str | None,
                reasons: dict[str, str]) -> ServerConfig:
        cache = page.cache
        prov: dict[str, Provenance] = {}
        capacity = cache.capacity_tokens
        if capacity is not None:
            prov["n_ctx_total"] = Provenance.MEASURED
        else:
            reasons["n_ctx_total"] = "vllm:cache_config_info gives no num_gpu_blocks × block_size yet"
        kv_type, why_type = kv_type_of(cache.cache_dtype, model_dtype)
        if kv_type is not None:
            prov["type_k"] = prov["type_v"] = Provenance.MEASURED if cache.cache_dtype != "auto" else \
                Provenance.COMPUTED
        else:
            reasons["kv_type"] = why_type or "cache dtype unknown"
        alloc = None
        if capacity is not None and shape is not None and kv_type is not None:
            alloc = capacity * kv_mod.kv_bytes_per_token(shape, kv_type, kv_type).total
            prov["kv_bytes_allocated"] = Provenance.COMPUTED
        else:
            reasons["kv_allocated_bytes"] = "needs the pool's size in tokens, the model's shape and the cache dtype"
        max_len = card.max_model_len if card else None
        if max_len is not None:
            prov["n_ctx_per_slot"] = Provenance.MEASURED
        return ServerConfig(n_ctx_total=capacity, type_k=kv_type, type_v=kv_type, kv_bytes_allocated=alloc,
                            n_ctx_per_slot=max_len, model_path=card.root if card else None, provenance=prov)


def _counters(mm: ModelMetrics) -> dict[str, float]:
    """The reading's raw numbers (counters by their exposed name without ``vllm:``; gauges by theirs)."""
    out: dict[str, float] = {}
    for key, value in (("generation_tokens_total", mm.generation_tokens_total),
                       ("prompt_tokens_total", mm.prompt_tokens_total),
                       ("num_preemptions_total", mm.preemptions_total),
                       ("num_requests_running", mm.requests_running),
                       ("num_requests_waiting", mm.requests_waiting),
                       ("prefix_cache_hits_total", mm.prefix_cache_hits_total),
                       ("prefix_cache_queries_total", mm.prefix_cache_queries_total),
                       ("spec_decode_num_drafts_total", mm.spec_drafts_total),
                       ("spec_decode_num_draft_tokens_total", mm.spec_draft_tokens_total),
                       ("spec_decode_num_accepted_tokens_total", mm.spec_accepted_tokens_total)):
        if value is not None:
            out[key] = value
    for pos, value in enumerate(mm.spec_accepted_per_position):
        out[position_counter(ACCEPTED_PER_POSITION, pos)] = value
    for h in (mm.ttft, mm.itl, mm.prefill_time, mm.prefill_tokens):
        if h is not None:
            out[f"{h.name}_sum"] = h.sum_s
            out[f"{h.name}_count"] = h.count
    return out
