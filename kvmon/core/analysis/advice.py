"""Advice computed from the state: which cheaper KV cache type would free how much VRAM and give what speed here,
with the flags to get it (llama-server's ``-ctk/-ctv``, Ollama's environment).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvmon.core.alert_types import CacheAdvice
from kvmon.core.backend import backend_of
from kvmon.core.readings import ServerReading
from kvmon.core.snapshot import ModelView
from kvmon.physics import advice as advice_mod


def cache_advice(r: ServerReading, model: ModelView, shape: Any, devices: list[Any] | None,
                 ceiling_now: float | None, decode: float | None, context: int | None, *,
                 advice_types: Sequence[str], median_efficiency: float | None) -> tuple[CacheAdvice, ...]:
    """Cheaper KV cache types (physics.advice): the VRAM they free and the speed they would give here.

    Nothing when the model's shape cannot answer the question (a cache type it cannot size).
    """
    backend = backend_of(r.backend)
    # a pool that fills the memory it is given frees nothing; a cache type that is no setting cannot be advised
    if backend.kv_pool_fills_memory or backend.cache_type_setting is None:
        return ()
    if shape is None or not model.n_ctx_total or model.kv_type_k is None or model.kv_type_v is None:
        return ()
    types = [t for t in advice_types if backend.offers_cache_type(t)]
    if not types:
        return ()
    depth = (context or 0) // 256 * 256  # the speed "here" at whole 256-token steps: it holds while a reply grows
    try:
        options = advice_mod.cache_type_counterfactuals(
            shape, n_ctx=model.n_ctx_total, context_tokens=depth, current_type_k=model.kv_type_k,
            current_type_v=model.kv_type_v, n_seq=model.n_slots or 1, unified=bool(model.kv_unified),
            n_ubatch=r.config.n_ubatch or 512, devices=tuple(devices or ()), candidates=[(t, t) for t in types])
    except (ValueError, KeyError):
        return ()
    # the server does not say its cache type (no command line, log or setting kvmon can read): llama.cpp's default
    # was taken, and the advice says so rather than advise a server that may already run a smaller cache
    assumed = r.config.type_k is None or r.config.type_v is None
    assumed_type = model.kv_type_k if assumed else None
    assumed_why = backend.hidden_cache_type_why if assumed else None
    out = []
    for opt in options:
        if opt.is_current or opt.vram_freed_bytes <= 0:
            continue
        tok_s = now = None  # with that type, and with today's, on the same footing (measured, or the forecast)
        if context is not None and opt.ceiling_change is not None:
            if decode is not None:
                now = decode
            elif median_efficiency is not None and ceiling_now:
                now = ceiling_now * median_efficiency
            tok_s = now * (1.0 + opt.ceiling_change) if now is not None else None
        fa = opt.needs_flash_attention and model.flash_attn in ("off", "disabled")
        flags = backend.cache_type_flags(opt.type_k, opt.type_v, needs_flash_attention=fa) or ""
        out.append(CacheAdvice(type_k=opt.type_k, type_v=opt.type_v, flags=flags,
                               freed_bytes=int(opt.vram_freed_bytes), tok_s=tok_s, tok_s_now=now,
                               assumed_type=assumed_type, assumed_why=assumed_why))
    return tuple(out)
