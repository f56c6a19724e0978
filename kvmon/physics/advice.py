"""Cache-type counterfactuals: for the running state, what another -ctk/-ctv would give.

For each candidate type pair: the KV cache it would reserve, the VRAM that frees (or costs), the ceiling tok/s
at the current depth, and the largest context that would fit before spilling.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvmon.physics.cache_types import cache_type
from kvmon.physics.ceiling import DeviceShare, ceiling_tok_s, max_context_fitting
from kvmon.physics.kv import kv_allocation, kv_bytes_in_use
from kvmon.physics.shape import ModelShape

DEFAULT_CANDIDATES: tuple[tuple[str, str], ...] = (("f16", "f16"), ("q8_0", "q8_0"), ("q4_0", "q4_0"))


@dataclass(frozen=True)
class CacheTypeOption:
    """One cache type pair in the current situation, computed (not measured)."""

    type_k: str
    type_v: str
    is_current: bool
    kv_allocated_bytes: int  # K + V + recurrent state for the current n_ctx and sequences
    vram_freed_bytes: int  # current allocation − this one (negative: would need more memory)
    ceiling_tok_s: float | None  # at the current context depth; None when a bandwidth is unknown
    ceiling_change: float | None  # ceiling relative to the current type's (0.05 = 5% faster)
    max_context_before_spill: int | None  # n_ctx fitting in free memory + today's cache; None if free unknown
    needs_flash_attention: bool  # llama.cpp rejects a quantized V cache without flash attention
    fits: bool | None  # this type at the current n_ctx fits where today's cache is; None if free unknown


def cache_type_counterfactuals(
    shape: ModelShape,
    *,
    n_ctx: int,
    context_tokens: int,
    current_type_k: str = "f16",
    current_type_v: str = "f16",
    n_seq: int = 1,
    unified: bool = False,
    n_ubatch: int = 512,
    devices: Sequence[DeviceShare] = (),
    vram_free_bytes: float | None = None,
    candidates: Sequence[tuple[str, str]] = DEFAULT_CANDIDATES,
) -> tuple[CacheTypeOption, ...]:
    """Options for the KV cache type, the current one first, then ``candidates`` in order (duplicates dropped).

    ``vram_free_bytes`` is memory free now where the cache lives; today's cache would be released on a
    restart, so the room for another type is free + today's allocation.
    """
    cur_k = cache_type(current_type_k).name
    cur_v = cache_type(current_type_v).name
    pairs: list[tuple[str, str]] = [(cur_k, cur_v)]
    for k, v in candidates:
        pair = (cache_type(k).name, cache_type(v).name)
        if pair not in pairs:
            pairs.append(pair)

    def alloc(k: str, v: str) -> int:
        return kv_allocation(shape, n_ctx, n_seq=n_seq, unified=unified, type_k=k, type_v=v,
                             n_ubatch=n_ubatch).total_bytes

    current_alloc = alloc(cur_k, cur_v)
    current_ceiling = ceiling_tok_s(devices, kv_bytes_in_use(shape, context_tokens, cur_k, cur_v)) if devices else None
    room = None if vram_free_bytes is None else vram_free_bytes + current_alloc
    options: list[CacheTypeOption] = []
    for k, v in pairs:
        allocated = current_alloc if (k, v) == (cur_k, cur_v) else alloc(k, v)
        ceiling = ceiling_tok_s(devices, kv_bytes_in_use(shape, context_tokens, k, v)) if devices else None
        change = None
        if ceiling is not None and current_ceiling:
            change = ceiling / current_ceiling - 1.0
        max_ctx = None
        if room is not None:
            max_ctx = max_context_fitting(shape, room, type_k=k, type_v=v, n_seq=n_seq, unified=unified,
                                          n_ubatch=n_ubatch)
        options.append(CacheTypeOption(
            type_k=k,
            type_v=v,
            is_current=(k, v) == (cur_k, cur_v),
            kv_allocated_bytes=allocated,
            vram_freed_bytes=current_alloc - allocated,
            ceiling_tok_s=ceiling,
            ceiling_change=change,
            max_context_before_spill=max_ctx,
            needs_flash_attention=cache_type(v).block_elements > 1,
            fits=None if room is None else allocated <= room,
        ))
    return tuple(options)
