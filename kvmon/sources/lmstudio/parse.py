"""LM Studio's model lists as plain values: REST v1 ``GET /api/v1/models`` (0.4+) and REST v0 ``GET /api/v0/models``
(0.3.6+), shaped as lmstudio-ai/docs ``1_developer/2_rest/list.md`` and ``endpoints.mdx`` document them.

v1 lists every downloaded model with ``loaded_instances[].config`` (``context_length``, ``eval_batch_size``,
``parallel``, ``flash_attention``, ``offload_kv_cache_to_gpu``, ``num_experts``), ``architecture``,
``quantization{name, bits_per_weight}``, ``size_bytes``, ``max_context_length`` and ``format``; v0 has
``state`` (``loaded`` / ``not-loaded``), ``arch``, ``quantization``, ``compatibility_type`` and
``max_context_length`` but no load settings. Every field goes through ``kvmon.core.jsonvals``: a wrong type is
absent, never an exception.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kvmon.core.jsonvals import json_array, json_int, json_object, json_str

LLM_TYPES = ("llm", "vlm")


@dataclass(frozen=True)
class Instance:
    """One loaded instance of a model and the settings it was loaded with (None where the list does not say)."""

    id: str
    context_length: int | None = None
    eval_batch_size: int | None = None
    parallel: int | None = None
    flash_attention: bool | None = None
    offload_kv_cache_to_gpu: bool | None = None


@dataclass(frozen=True)
class LmModel:
    """One model LM Studio lists."""

    key: str
    type: str | None
    arch: str | None
    quantization: str | None
    size_bytes: int | None
    max_context_length: int | None
    format: str | None  # gguf | mlx
    instances: tuple[Instance, ...] = ()
    loaded: bool = False
    params: str | None = None

    @property
    def is_llm(self) -> bool:
        return self.type in LLM_TYPES or self.type is None


def _bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def parse_v1(body: Any) -> tuple[list[LmModel], list[str]]:
    """REST v1's ``{"models": [...]}``; entries without a key are left out and noted."""
    rows = body.get("models") if isinstance(body, Mapping) else None
    if not isinstance(rows, list):
        return [], ["/api/v1/models has no models list"]
    out: list[LmModel] = []
    notes: list[str] = []
    for raw in rows:
        key = json_str(raw.get("key")) if isinstance(raw, Mapping) else None
        if not key or not isinstance(raw, Mapping):
            notes.append("/api/v1/models has an entry without a key")
            continue
        q = raw.get("quantization")
        quant = json_str(q.get("name")) if isinstance(q, Mapping) else json_str(q)
        instances: list[Instance] = []
        for inst in json_array(raw.get("loaded_instances")):
            if not isinstance(inst, Mapping):
                continue
            cfg = json_object(inst.get("config"))
            instances.append(Instance(
                id=json_str(inst.get("id")) or key, context_length=json_int(cfg.get("context_length")),
                eval_batch_size=json_int(cfg.get("eval_batch_size")), parallel=json_int(cfg.get("parallel")),
                flash_attention=_bool(cfg.get("flash_attention")),
                offload_kv_cache_to_gpu=_bool(cfg.get("offload_kv_cache_to_gpu"))))
        out.append(LmModel(key=key, type=json_str(raw.get("type")), arch=json_str(raw.get("architecture")),
                           quantization=quant, size_bytes=json_int(raw.get("size_bytes")),
                           max_context_length=json_int(raw.get("max_context_length")),
                           format=json_str(raw.get("format")), instances=tuple(instances), loaded=bool(instances),
                           params=json_str(raw.get("params_string"))))
    return out, notes


def parse_v0(body: Any) -> tuple[list[LmModel], list[str]]:
    """REST v0's ``{"data": [...]}``: loaded state, no load settings."""
    rows = body.get("data") if isinstance(body, Mapping) else None
    if not isinstance(rows, list):
        return [], ["/api/v0/models has no data list"]
    out: list[LmModel] = []
    notes: list[str] = []
    for raw in rows:
        key = json_str(raw.get("id")) if isinstance(raw, Mapping) else None
        if not key or not isinstance(raw, Mapping):
            notes.append("/api/v0/models has an entry without an id")
            continue
        loaded = raw.get("state") == "loaded"
        out.append(LmModel(key=key, type=json_str(raw.get("type")), arch=json_str(raw.get("arch")),
                           quantization=json_str(raw.get("quantization")), size_bytes=None,
                           max_context_length=json_int(raw.get("max_context_length")),
                           format=json_str(raw.get("compatibility_type")),
                           instances=(Instance(key),) if loaded else (), loaded=loaded))
    return out, notes


def server_summary(json: Callable[[str], Any]) -> tuple[str | None, str | None]:
    """(None: LM Studio's REST API gives no version, a few words on what it serves) for a list of servers, from
    ``json`` (a path's JSON body, None when it answered none)."""
    body = json("/api/v1/models")
    models = body.get("models") if isinstance(body, Mapping) else None
    if isinstance(models, list):
        loaded = [str(m.get("key")) for m in models if isinstance(m, Mapping) and m.get("loaded_instances")]
    else:
        v0 = json("/api/v0/models")
        data = v0.get("data") if isinstance(v0, Mapping) else None
        loaded = [str(m.get("id")) for m in data or () if isinstance(m, Mapping)
                  and m.get("state") == "loaded"]
    return None, (f"loaded: {', '.join(loaded)}" if loaded else "no model loaded")
