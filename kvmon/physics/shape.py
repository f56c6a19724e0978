"""A model's shape as the KV cache sees it, built from GGUF metadata (gguf reader or Ollama /api/show).

Per layer (``kvmon.physics.layers``): what it stores per token of context (full, windowed, chunked or MLA attention;
recurrent state; nothing of its own when it reuses an earlier layer's KV), following llama.cpp's per-architecture
rules (``kvmon.physics._families``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from kvmon.physics.layers import LayerShape


@dataclass(frozen=True)
class ModelShape:
    """What the KV/physics code needs of a model: per-layer storage, width, experts, and how sure we are."""

    arch: str
    n_layers: int
    layers: tuple[LayerShape, ...]
    n_embd: int
    n_head: int
    n_ctx_train: int | None = None
    expert_count: int = 0
    expert_used_count: int = 0
    partial: bool = False
    notes: tuple[str, ...] = ()
    expert_shared_count: int = 0
    feed_forward_length: int | None = None
    expert_feed_forward_length: int | None = None
    leading_dense_block_count: int = 0
    vocab_size: int | None = None
    key_length_mla: int | None = None  # MLA: per-head query/key length before compression (weights only)
    value_length_mla: int | None = None
    mtp_layers: tuple[LayerShape, ...] = ()  # the multi-token-prediction layers (nextn) as they store KV of their own

    def mtp_shape(self) -> ModelShape | None:
        """The shape the MTP layers' own context caches (``--spec-type draft-mtp``), or None without such layers."""
        if not self.mtp_layers:
            return None
        return replace(self, n_layers=len(self.mtp_layers), layers=self.mtp_layers, mtp_layers=(), partial=False,
                       notes=())

    def __hash__(self) -> int:
        """Hash of all fields, computed once (shapes key the physics caches and are hashed often)."""
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f.name) for f in fields(self)))
            object.__setattr__(self, "_hash", cached)
        return cached

    @property
    def is_moe(self) -> bool:
        """Whether tokens are routed to a subset of experts."""
        return self.expert_count > 1 and self.expert_used_count > 0

    @property
    def n_kv_layers(self) -> int:
        """Layers that own KV cells (llama.cpp's "N layers" in its KV size line)."""
        return sum(1 for layer in self.layers if layer.has_kv)

    @property
    def n_recurrent_layers(self) -> int:
        """Layers that hold a fixed recurrent state."""
        return sum(1 for layer in self.layers if layer.recurrent_elements > 0)

    @staticmethod
    def from_gguf(metadata: Mapping[str, Any]) -> ModelShape:
        """Build the shape from GGUF keys (``general.architecture``, ``<arch>.block_count``, ...)."""
        from kvmon.physics._families import shape_fields  # the per-architecture rules load on first use

        return ModelShape(**shape_fields(metadata))
