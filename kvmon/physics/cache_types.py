"""KV cache element types as llama.cpp stores them: block size and bytes per block.

The one table of cache-type sizes in kvmon (values from ggml's type traits).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CacheType:
    """A ggml tensor type usable for the KV cache: ``block_bytes`` hold ``block_elements`` values."""

    name: str
    block_elements: int
    block_bytes: int

    @property
    def bytes_per_element(self) -> float:
        return self.block_bytes / self.block_elements

    def bytes_for(self, n_elements: int) -> int:
        """Bytes taken by ``n_elements`` values (rows are whole blocks, as ggml requires)."""
        if n_elements < 0:
            raise ValueError(f"negative element count {n_elements}")
        blocks = -(-n_elements // self.block_elements)
        return blocks * self.block_bytes


class UnknownCacheType(ValueError):
    """A cache type name llama.cpp does not accept for ``-ctk``/``-ctv``."""


CACHE_TYPES: dict[str, CacheType] = {
    t.name: t
    for t in (
        CacheType("f32", 1, 4),
        CacheType("f16", 1, 2),
        CacheType("bf16", 1, 2),
        CacheType("q8_0", 32, 34),
        CacheType("q5_1", 32, 24),
        CacheType("q5_0", 32, 22),
        CacheType("q4_1", 32, 20),
        CacheType("q4_0", 32, 18),
        CacheType("iq4_nl", 32, 18),
    )
}

# Element types other servers keep their KV cache in that llama.cpp does not take for -ctk/-ctv: vLLM's
# --kv-cache-dtype fp8 (fp8_e4m3, fp8_e5m2, ...) stores one byte per value (vllm/utils/torch_utils.py).
OTHER_CACHE_TYPES: dict[str, CacheType] = {t.name: t for t in (CacheType("fp8", 1, 1),)}

DEFAULT_CACHE_TYPE = "f16"


def cache_type(name: str | None) -> CacheType:
    """Look a cache type up by name (case-insensitive); ``None`` means llama.cpp's default, f16."""
    key = (name or DEFAULT_CACHE_TYPE).strip().lower()
    try:
        return CACHE_TYPES[key] if key in CACHE_TYPES else OTHER_CACHE_TYPES[key]
    except KeyError:
        known = ", ".join(CACHE_TYPES)
        raise UnknownCacheType(f"unknown KV cache type {name!r}; llama.cpp accepts {known}") from None


def smaller_cache_type(current: str | None, suggested: Sequence[str]) -> str | None:
    """The first of ``suggested`` (the types a user lets kvmon suggest, mildest first) that stores a value in fewer
    bytes than ``current`` (None: llama.cpp's default); None when none does or a type is unknown."""
    try:
        now = bytes_per_element(current)
        return next((t for t in suggested if bytes_per_element(t) < now), None)
    except UnknownCacheType:
        return None


def bytes_per_element(name: str | None) -> float:
    """Average bytes per stored value for a cache type (q8_0: 34/32 = 1.0625)."""
    return cache_type(name).bytes_per_element
