"""Ollama source: loaded models, their VRAM/host split and context, the model shape, and a live rate.

Ollama publishes no running counters, so the live decode rate comes, best first, from the llama-server
child that Ollama >= 0.30 runs (its ``/slots``), from ``kvmon proxy`` (``GET /kvmon/stats``), or is
reported unavailable with how to enable it, never as 0. The endpoints' answers are parsed in
``kvmon.sources.ollama.parse``, the child is found in ``kvmon.sources.ollama.child``, the proxy's document is
read by ``kvmon.proxy.stats``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from kvmon.core.jsonvals import json_str
from kvmon.core.readings import (
    FailureKind,
    ModelInfo,
    Provenance,
    RateSource,
    ServerConfig,
    ServerReading,
    SlotReading,
    SourceError,
)
from kvmon.sources import procs
from kvmon.sources.config import merge_configs, user_config
from kvmon.sources.http import HttpClient, decode_json, normalize_base_url, raise_for_status, redact_url
from kvmon.sources.model_file import ModelFiles
from kvmon.sources.ollama import OLLAMA
from kvmon.sources.ollama.child import PLACEMENT_FIELDS, ChildTracker, ollama_log_config
from kvmon.sources.ollama.parse import (
    OllamaModel,
    ShowInfo,
    names_match,
    parse_parameter_size,
    parse_ps,
    parse_show,
    pick_active,
)
from kvmon.sources.proxy_reader import ProxyReader, proxy_slots

DEFAULT_PORT = OLLAMA.ports[0]
DEFAULT_PROXY_URL = "http://127.0.0.1:11435"
ENABLE_LIVE_RATE_HINT = "run `kvmon proxy` and point your client at 127.0.0.1:11435"
SHOW_MAX_BODY_BYTES = 96 * 1024 * 1024  # verbose /api/show carries the whole tokenizer: tens of MB for big vocabularies
SHOW_RETRY_S = 30.0  # after a failed /api/show, ask again no sooner than this
# Ollama's defaults where neither the child's argv nor its environment said: 1 parallel slot (OLLAMA_NUM_PARALLEL),
# one KV stream per slot (the bottom config layer).
OLLAMA_DEFAULTS = ServerConfig(n_parallel=1, kv_unified=False,
                               provenance={"n_parallel": Provenance.DEFAULT, "kv_unified": Provenance.DEFAULT})


# ---------------------------------------------------------------------------------------------- the source


@dataclass
class _ShowEntry:
    info: ShowInfo | None
    reason: str | None
    fetched_at: float


class OllamaSource:
    """Poll an Ollama server: ``/api/ps`` each poll, ``/api/version`` once, ``/api/show`` once per model digest."""

    backend = OLLAMA

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 3.0,
        proxy_url: str | None = None,
        find_child: bool = True,
        log_path: str | None = None,
        config_override: ServerConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_url = normalize_base_url(base_url, DEFAULT_PORT)
        self._clock = clock  # timestamps readings; a simulator's clock makes rates come out in its time
        self.display_url = redact_url(self.base_url)
        self._timeout_s = timeout_s
        self._client = HttpClient(self.base_url, api_key=api_key, timeout_s=timeout_s)
        self._show_client = HttpClient(
            self.base_url, api_key=api_key, timeout_s=timeout_s, max_body_bytes=SHOW_MAX_BODY_BYTES
        )
        self._proxy_reader = ProxyReader(proxy_url, DEFAULT_PROXY_URL, self.base_url, DEFAULT_PORT)
        self._version: str | None = None  # asked once, again after a failed poll (a restart may change it)
        self._shows: dict[str, _ShowEntry] = {}  # /api/show per model digest
        self._files = ModelFiles()  # the model blob's GGUF header and shape, once per version of the file
        self._log_path = log_path
        self._log_cache: tuple[float, ServerConfig | None, str | None] | None = None  # (mtime, config, why)
        self._override = user_config(config_override)
        self._is_local = procs.is_local_host(urlsplit(self.base_url).hostname)
        self._child_tracker: ChildTracker | None = None
        if find_child and self._is_local:
            port = urlsplit(self.base_url).port or DEFAULT_PORT
            self._child_tracker = ChildTracker(port, timeout_s=min(timeout_s, 2.0))

    def __repr__(self) -> str:
        return f"OllamaSource({self.display_url!r})"

    def close(self) -> None:
        """Close HTTP clients (and the child's source, if one was opened)."""
        self._client.close()
        self._show_client.close()
        self._proxy_reader.close()
        if self._child_tracker is not None:
            self._child_tracker.close()

    # -- pieces

    def _show(self, model: OllamaModel, now: float) -> tuple[ShowInfo | None, str | None]:
        key = model.digest or model.name
        entry = self._shows.get(key)
        if entry is not None and (entry.info is not None or now - entry.fetched_at < SHOW_RETRY_S):
            return entry.info, entry.reason
        info: ShowInfo | None = None
        reason: str | None = None
        try:
            info = self._fetch_show(model.model or model.name, verbose=True)
        except SourceError as e:
            reason = f"verbose /api/show failed ({e.failure.reason})"
            try:  # smaller answer, per-layer arrays blanked: a partial shape beats none
                info = self._fetch_show(model.model or model.name, verbose=False)
            except SourceError as e2:
                reason = f"/api/show failed: {e2.failure.reason}"
            else:
                reason = None
        self._shows = {k: v for k, v in self._shows.items() if now - v.fetched_at < 3600.0}
        self._shows[key] = _ShowEntry(info, reason, now)
        return info, reason

    def _log_config(self) -> tuple[ServerConfig | None, str | None]:
        """Settings from Ollama's log, re-read only when the file changes."""
        assert self._log_path is not None
        try:
            mtime = os.stat(self._log_path).st_mtime
        except OSError as e:
            return None, f"Ollama log {self._log_path} not readable ({e.strerror or type(e).__name__})"
        if self._log_cache is None or self._log_cache[0] != mtime:
            config, why = ollama_log_config(self._log_path)
            self._log_cache = (mtime, config, why)
        return self._log_cache[1], self._log_cache[2]

    def _model_file(self, path: str, digest: str | None) -> tuple[int | None, Any, str | None]:
        """(weight bytes, shape, why not) from the model file's GGUF header: read once per model digest (a blob is
        named by its content, so one digest is one file), else once per version of the file."""
        header, why, key = self._files.header(path, digest or None)
        if header is None:
            return None, None, why
        shape, swhy = self._files.shape(header.metadata, key)
        if header.tensor_bytes is None:
            name = os.path.basename(path)
            empty = (f"model file {name!r}'s tensor directory lists no tensors" if header.tensor_count == 0
                     else f"model file {name!r} holds a tensor of a type kvmon cannot size")
            swhy = "; ".join(x for x in (empty, swhy) if x)
        return header.tensor_bytes, shape, swhy

    def _fetch_show(self, name: str, *, verbose: bool) -> ShowInfo:
        body = {"model": name, "verbose": True} if verbose else {"model": name}
        resp = self._show_client.request("POST", "/api/show", json_body=body)
        raise_for_status(resp, "/api/show", self.display_url)
        return parse_show(decode_json(resp, "/api/show"), verbose=verbose)

    # -- the poll

    def poll(self) -> ServerReading:
        """One reading; raises ``SourceError`` when Ollama cannot be read at all."""
        t_mono, t_wall = self._clock(), time.time()
        version, version_reason = self._version_safe()
        try:
            models, notes = parse_ps(self._client.get_json("/api/ps"))
        except SourceError:
            self._version = None  # re-check on the next poll (a restart may change it)
            raise
        reasons: dict[str, str] = {}
        if notes:
            reasons["models"] = "; ".join(notes)
        if version_reason:
            reasons["server_version"] = version_reason
        proxy, proxy_reason = self._proxy_reader.read(t_mono, t_wall)
        busy = [s.model for s in proxy.in_flight if s.model] if proxy else []
        active = pick_active(models, busy)
        if len(models) > 1 and active is not None:
            others = ", ".join(m.name for m in models if m is not active)
            reasons["other_models"] = f"also loaded: {others} (showing the one used last)"
        if active is None:
            reasons["model"] = "no model loaded in Ollama (it loads one on the first request)"
            return ServerReading(
                t_monotonic=t_mono,
                t_wall=t_wall,
                backend=self.backend,
                url=self.display_url,
                server_version=version,
                state="idle",
                live_rate_source="proxy" if proxy else None,
                live_rate_unavailable_reason=None if proxy else "no model loaded",
                reasons=reasons,
            )

        show, show_reason = self._show(active, t_mono)
        if show_reason:
            reasons["shape"] = show_reason
        elif show is not None and show.shape_reason:
            reasons["shape"] = show.shape_reason
        measured: ServerConfig | None = None
        if active.context_length is not None:
            measured = ServerConfig(n_ctx_per_slot=active.context_length,
                                    provenance={"n_ctx_per_slot": Provenance.MEASURED})
        else:
            reasons["n_ctx"] = "this Ollama's /api/ps has no context_length (added in Ollama 0.10)"

        # Live rate, best first: the llama-server child, the proxy, else say how to get one.
        def mine(model: str | None) -> bool:  # a request to the active model (the proxy may not say which)
            return model is None or names_match(model, active)

        last = proxy.last if proxy is not None and mine(proxy.last_model) else None
        slots: tuple[SlotReading, ...] = ()
        total_slots: int | None = None
        kv_unified: bool | None = None
        rate_source: RateSource | None = None
        rate_reason: str | None = None
        server_pids: tuple[int, ...] = ()
        child_reading: ServerReading | None = None
        child_reason: str | None = None
        child_config: ServerConfig | None = None
        if self._child_tracker is not None:
            child_reading, child_reason, server_pids, child_config = self._child_tracker.poll(
                show.blob_path if show else None
            )
        elif not self._is_local:
            child_reason = "Ollama is on another machine: its llama-server child cannot be found from here"
        log_config: ServerConfig | None = None
        if self._log_path:
            log_config, log_reason = self._log_config()
            if log_config is None and log_reason:
                reasons["log"] = log_reason
            log_config = _for_active_model(log_config, show.blob_path if show else None, reasons)
        # Ollama's defaults < its log < what /api/ps measured < the child's argv and environment < the user
        config = merge_configs(OLLAMA_DEFAULTS, log_config, measured, child_config, self._override)
        if child_reading is not None:
            slots = tuple(replace(s, n_ctx=s.n_ctx or active.context_length) for s in child_reading.slots)
            total_slots = child_reading.total_slots
            kv_unified = child_reading.kv_unified
            rate_source = "child_slots"
        elif proxy is not None:
            slots, how = proxy_slots(proxy, active.context_length, mine, last)
            if how:
                reasons["context_tokens"] = how
            rate_source = "proxy"
        else:
            why = "; ".join(r for r in (child_reason, proxy_reason) if r)
            rate_reason = f"live rate unavailable: {ENABLE_LIVE_RATE_HINT}" + (f" ({why})" if why else "")

        if last is not None and proxy is not None and proxy.last_prefill_reason:
            reasons["prefill_tok_s"] = proxy.last_prefill_reason

        model_path = config.model_path or (show.blob_path if show else None)
        weight_bytes = show.weight_bytes if show else None
        if weight_bytes is not None and show is not None:
            reasons["weight_bytes"] = f"summed from /api/show's tensor list ({show.n_tensors} tensors)"
        shape = show.shape if show else None
        shape_source = "ollama_show" if shape is not None else None
        if (weight_bytes is None or shape is None) and model_path and self._is_local:
            # The model file itself, when Ollama runs here and it is readable: exact weights and shape.
            gguf_weights, gguf_shape, gguf_reason = self._model_file(model_path, active.digest)
            if weight_bytes is None and gguf_weights is not None:
                weight_bytes = gguf_weights
                reasons["weight_bytes"] = "summed from the model file's tensor directory"
            if shape is None and gguf_shape is not None:
                shape, shape_source = gguf_shape, "gguf"
                reasons.pop("shape", None)
            if gguf_reason and (weight_bytes is None or shape is None):
                reasons["model_file"] = gguf_reason
        if weight_bytes is None:
            reasons["weight_bytes"] = (
                "weights not known: /api/show listed no tensor sizes (/api/ps size also holds KV cache and buffers)"
            )
        n_params = show.n_params if show and show.n_params else parse_parameter_size(active.parameter_size)
        model = ModelInfo(
            name=active.name,
            arch=(show.arch if show else None) or getattr(shape, "arch", None) or active.family,
            n_params=n_params,
            weight_bytes=weight_bytes,
            n_ctx_train=(show.n_ctx_train if show else None) or getattr(shape, "n_ctx_train", None),
            n_embd=(show.n_embd if show else None) or getattr(shape, "n_embd", None),
            quantization=active.quantization,
            path=model_path,
            digest=active.digest,
            shape=shape,
            shape_source=shape_source,
        )
        host_bytes = active.host_bytes
        if host_bytes:
            reasons["weight_bytes_host"] = (
                f"partial offload: {host_bytes} bytes of {active.name} live in host RAM (size_vram < size)"
            )
        if config.n_ctx_total is None and active.context_length is not None:  # context_length per slot
            config = replace(config, n_ctx_total=active.context_length * (config.n_parallel or 1),
                             provenance={**config.provenance, "n_ctx_total": Provenance.COMPUTED})
        return ServerReading(
            t_monotonic=t_mono,
            t_wall=t_wall,
            backend=self.backend,
            url=self.display_url,
            server_version=version,
            state="ok",
            model=model,
            slots=slots,
            total_slots=total_slots,
            kv_unified=kv_unified,
            config=config,
            weight_bytes_vram=active.size_vram_bytes,
            weight_bytes_host=host_bytes,
            live_rate_source=rate_source,
            live_rate_unavailable_reason=rate_reason,
            last_request=last,
            server_pids=server_pids,
            reasons=reasons,
        )

    def _version_safe(self) -> tuple[str | None, str | None]:
        """(Ollama's version, why it is unknown); raises only when the server cannot be reached or refuses the key."""
        hung = self._client.hangs("/api/version")  # known to hang: unknown, and /api/ps decides
        try:
            if self._version is None:
                body = self._client.get_json("/api/version")
                self._version = json_str(body.get("version")) if isinstance(body, dict) else None
            return self._version, None
        except SourceError as e:
            if e.failure.kind in (FailureKind.UNREACHABLE, FailureKind.AUTH_REJECTED) or (
                    e.failure.kind is FailureKind.TIMEOUT and not hung):
                raise
            return None, f"version unknown: {e.failure.reason}"  # /api/ps decides whether this is Ollama at all


def _for_active_model(cfg: ServerConfig | None, blob_path: str | None, reasons: dict[str, str]) -> ServerConfig | None:
    """The log's placement (buffers, layers) only when its last load is the active model's file; the devices stay."""
    if cfg is None or not cfg.model_path or not blob_path:
        return cfg
    if os.path.basename(cfg.model_path) == os.path.basename(blob_path):
        return cfg
    reasons["log_placement"] = "the Ollama log's last model load is another model's: its placement is not used"
    unset = ServerConfig()  # each placement field back to what no layer said
    return replace(cfg, **{k: getattr(unset, k) for k in PLACEMENT_FIELDS},
                   provenance={k: v for k, v in cfg.provenance.items() if k not in PLACEMENT_FIELDS})
