"""Physics results per model shape, computed once: every poll asks the same questions of the same model.

Keyed by the shape's equality (a source may rebuild an equal shape on every poll) and the question; a new
shape starts an empty memo. The curve, the milestones and the advice are memoised here too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvmon.core.readings import ServerConfig
from kvmon.physics import kv as kv_mod

MAX_ENTRIES = 4096


class PhysicsMemo:
    """``get(shape, key, fn)``: ``fn()`` the first time, the same answer after, until another shape comes."""

    def __init__(self) -> None:
        self._memo: dict[tuple[Any, ...], Any] = {}
        self._shape: Any = None

    def get(self, shape: Any, key: tuple[Any, ...], fn: Callable[[], Any]) -> Any:
        """The answer to ``key`` for ``shape`` (``fn`` computes it when it is not known yet)."""
        if shape is not self._shape and shape != self._shape:
            self._memo.clear()
        self._shape = shape
        try:
            return self._memo[key]
        except KeyError:
            pass
        if len(self._memo) > MAX_ENTRIES:
            self._memo.clear()
        value = self._memo[key] = fn()
        return value

    def clear(self) -> None:
        """Forget every answer (a new session)."""
        self._memo.clear()
        self._shape = None

    def kv_in_use(self, shape: Any, ctx: float, type_k: str, type_v: str) -> float:
        """KV bytes that ``ctx`` positions of context hold (read per token at that depth)."""
        return float(self.get(shape, ("use", ctx, type_k, type_v),
                              lambda: kv_mod.kv_bytes_in_use(shape, ctx, type_k, type_v)))

    def kv_alloc(self, shape: Any, n_ctx: int, n_seq: int, unified: bool, type_k: str, type_v: str,
                 cfg: ServerConfig) -> int:
        """The K+V bytes llama.cpp allocates at load for ``n_ctx`` cells (its KV size line; a hybrid's recurrent
        state is apart), with the batch, --swa-full and flash-attention settings it uses."""
        n_ubatch, n_batch = cfg.n_ubatch or kv_mod.DEFAULT_N_UBATCH, cfg.n_batch or kv_mod.DEFAULT_N_BATCH
        swa_full = bool(cfg.swa_full)
        flash_attn = cfg.flash_attn != "off"  # "auto" lays the cache out for flash attention, as "on" does
        key = ("alloc", n_ctx, n_seq, unified, type_k, type_v, n_ubatch, n_batch, swa_full, flash_attn)
        return int(self.get(shape, key, lambda: kv_mod.kv_allocation(
            shape, n_ctx, n_seq=n_seq, unified=unified, type_k=type_k, type_v=type_v, n_ubatch=n_ubatch,
            n_batch=n_batch, swa_full=swa_full, flash_attn=flash_attn).kv_bytes))
