"""LM Studio: the loaded model and its load settings from REST v1 ``/api/v1/models`` (0.4+; else v0's
``/api/v0/models``), live speeds from ``kvmon proxy`` in front of it (LM Studio has no counters or metrics endpoint;
its responses carry ``stats`` the proxy reads), and the model's shape from its GGUF file when one is found here.

The list gives ``context_length``, ``parallel``, ``flash_attention`` and ``offload_kv_cache_to_gpu`` of each loaded
instance, not the KV cache type nor the model's file: the type stays llama.cpp's default (said so), and the GGUF is
looked for under LM Studio's models folder (``~/.lmstudio/models``, ``$LMSTUDIO_MODELS_DIR``) as the one file whose
path names both the model and its quantization; none or several is a reason, never a pick. MLX models have no GGUF.
"""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from kvmon.core.readings import (
    FailureKind,
    ModelInfo,
    Provenance,
    RateSource,
    RequestStats,
    ServerConfig,
    ServerReading,
    SlotReading,
    SourceError,
    SourceFailure,
)
from kvmon.proxy.stats import ProxyView
from kvmon.sources import procs
from kvmon.sources.http import HttpClient, decode_json, normalize_base_url, raise_for_status
from kvmon.sources.lmstudio import LMSTUDIO
from kvmon.sources.lmstudio.parse import Instance, LmModel, parse_v0, parse_v1
from kvmon.sources.model_file import ModelFiles
from kvmon.sources.proxy_reader import ProxyReader, proxy_slots

BACKEND = LMSTUDIO
DEFAULT_PORT = LMSTUDIO.ports[0]
DEFAULT_PROXY_URL = "http://127.0.0.1:1235"
LIVE_RATE_HINT = ("LM Studio has no live counters: run `kvmon proxy --listen 127.0.0.1:1235 --upstream "
                  "http://127.0.0.1:1234` and point your client at 127.0.0.1:1235")
MAX_GGUF_CANDIDATES = 2000  # files looked at under the models folder (a huge library is not walked whole)


def models_dirs(environ: dict[str, str] | None = None) -> list[str]:
    """LM Studio's models folders, the user's setting first (0.3+: ``~/.lmstudio/models``; older:
    ``~/.cache/lm-studio/models``)."""
    env = os.environ if environ is None else environ
    home = os.path.expanduser("~")
    out = [env.get("LMSTUDIO_MODELS_DIR", ""), os.path.join(home, ".lmstudio", "models"),
           os.path.join(home, ".cache", "lm-studio", "models")]
    return [d for d in out if d and os.path.isdir(d)]


def find_gguf(model: LmModel, folders: list[str]) -> tuple[str | None, str | None]:
    """(the model's GGUF path, why none): the one ``.gguf`` whose path names the model and its quantization."""
    if model.format == "mlx":
        return None, "an MLX model: no GGUF to read its shape from"
    if not folders:
        return None, "LM Studio's models folder is not on this machine (set LMSTUDIO_MODELS_DIR)"
    name = model.key.rsplit("/", 1)[-1].split("@", 1)[0].lower()
    quant = (model.quantization or "").lower()
    hits: list[str] = []
    seen = 0
    for folder in folders:
        for path in glob.iglob(os.path.join(glob.escape(folder), "**", "*.gguf"), recursive=True):
            seen += 1
            if seen > MAX_GGUF_CANDIDATES:
                break
            low = path.lower()
            if name in low and (not quant or quant in os.path.basename(low)) and "mmproj" not in low:
                hits.append(path)
    if len(hits) == 1:
        return hits[0], None
    if not hits:
        return None, (f"no GGUF for {model.key} ({model.quantization or 'quantization unknown'}) in LM Studio's "
                      "models folder")
    return None, f"{len(hits)} GGUF files could be {model.key}: LM Studio does not say which it loaded"


class LmStudioSource:
    """LM Studio's server: its model list each poll, ``kvmon proxy``'s stats for live speeds."""

    backend = BACKEND

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout_s: float = 3.0,
                 proxy_url: str | None = None, models_dir: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``models_dir``: where LM Studio keeps its models, when not in its default place."""
        self.base_url = normalize_base_url(base_url, DEFAULT_PORT)
        self._http = HttpClient(self.base_url, api_key=api_key, timeout_s=timeout_s)
        self.display_url = self._http.display_url
        self._clock = clock
        self._proxy = ProxyReader(proxy_url, DEFAULT_PROXY_URL, self.base_url, DEFAULT_PORT)
        self._local = procs.is_local_host(urlsplit(self.base_url).hostname or "")
        self._models_dir = models_dir
        self._api = "v1"
        self._files = ModelFiles()
        self._gguf: dict[tuple[str, str | None], tuple[str | None, str | None]] = {}

    def __repr__(self) -> str:
        return f"LmStudioSource({self.display_url!r})"

    def close(self) -> None:
        self._http.close()
        self._proxy.close()

    def _list(self) -> tuple[list[LmModel], list[str]]:
        """The model list from REST v1, or v0 on a server older than 0.4 (remembered)."""
        if self._api == "v1":
            resp = self._http.get("/api/v1/models")
            if resp.status_code != 404:
                raise_for_status(resp, "/api/v1/models", self.display_url)
                return parse_v1(decode_json(resp, "/api/v1/models"))
            self._api = "v0"
        resp = self._http.get("/api/v0/models")
        if resp.status_code == 404:
            self._api = "v1"
            raise SourceError(SourceFailure(
                FailureKind.NOT_FOUND, f"{self.display_url} answers neither /api/v1/models nor /api/v0/models: "
                "not LM Studio's server", "/api/v0/models", 404))
        raise_for_status(resp, "/api/v0/models", self.display_url)
        return parse_v0(decode_json(resp, "/api/v0/models"))

    def _shape(self, model: LmModel, reasons: dict[str, str]) -> tuple[object, int | None, str | None]:
        """(shape, weight bytes from the file, path) of the model's GGUF when it is found here."""
        if not self._local:
            reasons["model_shape"] = "LM Studio runs on another machine: its model file is not readable here"
            return None, None, None
        key = (model.key, model.quantization)
        if key not in self._gguf:
            folders = [self._models_dir] if self._models_dir else models_dirs()
            self._gguf[key] = find_gguf(model, folders)
        path, why = self._gguf[key]
        if path is None:
            reasons["model_shape"] = why or "model file not found"
            return None, None, None
        header, why, fkey = self._files.header(path)
        if header is None:
            reasons["model_shape"] = why or "GGUF header not readable"
            return None, None, path
        shape, why = self._files.shape(header.metadata, fkey)
        if shape is None:
            reasons["model_shape"] = why or "model shape not understood"
        return shape, header.tensor_bytes, path

    def poll(self) -> ServerReading:
        """One reading; raises SourceError when LM Studio's model list cannot be read."""
        models, notes = self._list()
        t, t_wall = self._clock(), time.time()
        reasons: dict[str, str] = {"models": "; ".join(notes)} if notes else {}
        proxy, proxy_reason = self._proxy.read(t, t_wall)
        loaded = [m for m in models if m.loaded and m.is_llm]
        busy = {s.model for s in proxy.in_flight if s.model} if proxy else set()
        active = next((m for m in loaded if m.key in busy or any(i.id in busy for i in m.instances)),
                      loaded[0] if loaded else None)
        if active is None:
            return ServerReading(t_monotonic=t, t_wall=t_wall, backend=BACKEND, url=self.display_url, state="idle",
                                 live_rate_unavailable_reason="no model loaded",
                                 reasons={**reasons, "model": "no model loaded in LM Studio"})
        if len(loaded) > 1:
            reasons["other_models"] = "also loaded: " + ", ".join(m.key for m in loaded if m is not active)
        shape, file_bytes, path = self._shape(active, reasons)
        inst = active.instances[0]
        config = self._config(inst, path, reasons)
        weight_bytes = file_bytes or active.size_bytes  # a header without tensors (0) says nothing of the weights
        if not file_bytes and active.size_bytes is not None:
            reasons["weight_bytes"] = "LM Studio's size_bytes of the model's files"
        model = ModelInfo(name=active.key, arch=active.arch, quantization=active.quantization,
                          weight_bytes=weight_bytes, n_ctx_train=active.max_context_length, path=path, shape=shape,
                          shape_source="gguf" if shape is not None else None)
        slots, last, rate_source, rate_reason = self._live(proxy, proxy_reason, active, inst, reasons)
        return ServerReading(
            t_monotonic=t, t_wall=t_wall, backend=BACKEND, url=self.display_url, model=model, slots=slots,
            config=config,
            live_rate_source=rate_source, live_rate_unavailable_reason=rate_reason, last_request=last,
            reasons=reasons)

    def _config(self, inst: Instance, path: str | None, reasons: dict[str, str]) -> ServerConfig:
        prov: dict[str, Provenance] = {}
        for name, value in (("n_ctx_total", inst.context_length), ("n_batch", inst.eval_batch_size),
                            ("flash_attn", inst.flash_attention), ("kv_offload", inst.offload_kv_cache_to_gpu)):
            if value is not None:
                prov[name] = Provenance.MEASURED
        if inst.context_length is None:
            reasons["n_ctx_total"] = ("LM Studio's REST v0 list has no load settings (v1, LM Studio 0.4+, has)"
                                      if self._api == "v0" else "the instance's config has no context_length")
        parallel = inst.parallel
        if parallel is not None and parallel > 1:
            reasons["parallel"] = (f"{parallel} parallel predictions: whether they share one context (a unified KV "
                                   "cache) is not documented, so one conversation's limit is unknown")
        one = parallel == 1 or (parallel is None and inst.context_length is not None)
        if one:  # one prediction at a time: one sequence, so one stream (unified, trivially)
            prov["n_parallel"] = Provenance.MEASURED if parallel == 1 else Provenance.DEFAULT
            prov["kv_unified"] = Provenance.COMPUTED
        return ServerConfig(
            n_ctx_total=inst.context_length, n_parallel=1 if one else None, kv_unified=True if one else None,
            flash_attn=None if inst.flash_attention is None else ("on" if inst.flash_attention else "off"),
            n_batch=inst.eval_batch_size, kv_offload=inst.offload_kv_cache_to_gpu, model_path=path,
            provenance=prov)

    def _live(self, proxy: ProxyView | None, proxy_reason: str | None, active: LmModel, inst: Instance,
              reasons: dict[str, str]) -> tuple[tuple[SlotReading, ...], RequestStats | None, RateSource | None,
                                                 str | None]:
        """(the proxy's streams as slots, at the conversation's depth the replies' stats give, its last finished
        request, rate source, why no live rate)."""
        if proxy is None:
            return (), None, None, proxy_reason or LIVE_RATE_HINT
        mine = {active.key, inst.id}
        last = proxy.last if proxy.last_model is None or proxy.last_model in mine else None
        slots, how = proxy_slots(proxy, inst.context_length, lambda m: m is None or m in mine, last)
        if how:
            reasons["context_tokens"] = how
        return slots, last, "proxy", None

