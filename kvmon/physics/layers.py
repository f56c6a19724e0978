"""The per-layer vocabulary of a model's shape: what one layer keeps per token, and the GGUF value readers.

``kvmon.physics.shape`` (the whole model) and ``kvmon.physics._families`` (the per-architecture rules) both
build on these; neither is needed here.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


class ShapeError(ValueError):
    """The metadata cannot describe a model: a required key is missing or values contradict each other."""


class AttentionKind(str, enum.Enum):
    """What one layer keeps per token of context."""

    FULL = "full"  # K and V for every position
    SWA = "swa"  # K and V for the last `window` positions
    CHUNKED = "chunked"  # K and V within the current `window`-sized chunk (llama4)
    RECURRENT = "recurrent"  # a fixed-size state, independent of context length
    MLA = "mla"  # one compressed latent per position (DeepSeek MLA); only K is cached
    SHARED = "shared"  # reuses the KV of an earlier layer; holds nothing of its own
    NONE = "none"  # no attention and no state (e.g. an MLP-only layer of nemotron_h)


@dataclass(frozen=True)
class LayerShape:
    """One layer: its kind, KV heads and head lengths, window, and recurrent state size (elements, f32)."""

    index: int
    kind: AttentionKind
    n_head_kv: int = 0
    key_length: int = 0
    value_length: int = 0
    window: int | None = None  # SWA window / chunk size in tokens
    shares_kv_with: int | None = None  # SHARED: the layer whose cache it reads
    recurrent_elements: int = 0  # n_embd_r + n_embd_s per sequence (falcon-h1: alongside KV)

    @property
    def has_kv(self) -> bool:
        """Whether this layer owns K/V cells in the cache."""
        return self.kind in (AttentionKind.FULL, AttentionKind.SWA, AttentionKind.CHUNKED, AttentionKind.MLA)

    @property
    def k_elements(self) -> int:
        """K values stored per token (n_embd_k_gqa)."""
        return self.n_head_kv * self.key_length if self.has_kv else 0

    @property
    def v_elements(self) -> int:
        """V values stored per token (n_embd_v_gqa); zero for MLA, which caches only the latent in K."""
        if not self.has_kv or self.kind is AttentionKind.MLA:
            return 0
        return self.n_head_kv * self.value_length


def plain(value: Any) -> Any:
    """A metadata value as plain Python: numpy scalars/arrays → int/float/list, bytes → str."""
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    tolist = getattr(value, "tolist", None)
    if callable(tolist) and not isinstance(value, (str, list, tuple)):
        try:
            value = tolist()
        except (TypeError, ValueError):
            return value
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def as_int(value: Any, key: str) -> int:
    """One integer from a metadata value; ShapeError when it is not a whole, non-negative number."""
    v = plain(value)
    if isinstance(v, list) and len(v) == 1:  # a one-element array, as raw gguf reader parts hold scalars
        v = v[0]
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if not isinstance(v, int):
        raise ShapeError(f"{key} is {v!r}, not an integer")
    if v < 0:
        raise ShapeError(f"{key} is negative ({v})")
    return v


def per_layer(value: Any, n_layers: int, key: str) -> list[int] | None:
    """A scalar or per-layer array as one int per layer; None when the array is empty (Ollama trims long arrays)."""
    v = plain(value)
    if isinstance(v, list) and len(v) == 1 and n_layers != 1:
        v = v[0]  # a scalar held in a one-element array
    if isinstance(v, list):
        if not v:
            return None
        if len(v) != n_layers:
            raise ShapeError(f"{key} has {len(v)} entries for {n_layers} layers")
        return [as_int(x, key) for x in v]
    n = as_int(v, key)
    return [n] * n_layers


def layer_kinds_summary(layers: Sequence[LayerShape]) -> str:
    """A short human summary such as "48 recurrent + 16 full"."""
    counts = Counter(layer.kind.value for layer in layers)
    return " + ".join(f"{n} {k}" for k, n in counts.items())
