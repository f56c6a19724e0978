"""KV cache bytes: per token, read per decode step at a depth, and as llama.cpp allocates them at load.

The allocation reproduces llama.cpp's ``llama_kv_cache: size = … MiB`` line (cells padded to 256, one stream
per sequence unless unified, SWA layers holding only window + ubatch cells, recurrent state in f32).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from kvmon.physics.cache_types import cache_type
from kvmon.physics.layers import AttentionKind, LayerShape
from kvmon.physics.shape import ModelShape

CELL_PADDING = 256
DEFAULT_N_UBATCH = 512  # llama-server's -ub and -b defaults
DEFAULT_N_BATCH = 2048
RECURRENT_STATE_BYTES_PER_ELEMENT = 4  # llama.cpp keeps recurrent (conv + ssm / wkv) state in f32


def pad_cells(n: int, to: int = CELL_PADDING) -> int:
    """Round a cell count up to llama.cpp's padding (256)."""
    return -(-n // to) * to


@dataclass(frozen=True)
class KvPerToken:
    """K and V bytes that one token of context adds across all layers owning KV cells."""

    k_bytes: int
    v_bytes: int

    @property
    def total(self) -> int:
        """K + V bytes per token."""
        return self.k_bytes + self.v_bytes


@dataclass(frozen=True)
class KvAllocation:
    """What llama.cpp reserves at load: cells per stream (full and SWA), K/V bytes over all streams, state."""

    cells: int
    swa_cells: int
    k_bytes: int
    v_bytes: int
    recurrent_bytes: int
    n_streams: int = 1
    n_kv_layers: int = 0
    swa_k_bytes: int = 0  # the part of k_bytes / v_bytes held by SWA/chunked layers
    swa_v_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        """Everything reserved: K, V and the recurrent state."""
        return self.k_bytes + self.v_bytes + self.recurrent_bytes

    @property
    def kv_bytes(self) -> int:
        """K + V only (llama.cpp's ``llama_kv_cache: size``), without the recurrent state."""
        return self.k_bytes + self.v_bytes


def _table(shape: ModelShape, type_k: str | None, type_v: str | None) -> tuple[tuple[LayerShape, int, int], ...]:
    """(layer, K bytes per token, V bytes per token) of every layer that owns KV cells."""
    tk, tv = cache_type(type_k), cache_type(type_v)
    return tuple((layer, tk.bytes_for(layer.k_elements), tv.bytes_for(layer.v_elements))
                 for layer in shape.layers if layer.has_kv)


def _v_row_max(shape: ModelShape, type_v: str | None) -> int:
    """Bytes of the widest layer's V row: without flash attention every layer's V is padded to it."""
    return cache_type(type_v).bytes_for(max((layer.v_elements for layer in shape.layers if layer.has_kv), default=0))


def kv_bytes_per_token(shape: ModelShape, type_k: str | None = "f16", type_v: str | None = "f16") -> KvPerToken:
    """Bytes each cached position costs: Σ over layers with own KV of n_head_kv × (key_len·s_k + value_len·s_v)."""
    table = _table(shape, type_k, type_v)
    return KvPerToken(sum(k for _, k, _ in table), sum(v for _, _, v in table))


@lru_cache(maxsize=256)  # the ceiling curve reads it at every depth: saves 2 ms a poll (0.12 CPU-s/min at 1 Hz)
def _read_profile(shape: ModelShape, type_k: str, type_v: str) -> tuple[int, tuple[tuple[int, int], ...]]:
    """(bytes per token read at any depth, ((window, bytes per token read up to that window), ...))."""
    tk, tv = cache_type(type_k), cache_type(type_v)
    unbounded = 0
    windowed: dict[int, int] = {}
    for layer in shape.layers:
        if layer.kind is AttentionKind.SHARED:  # reads the source layer's cache again
            n_bytes = tk.bytes_for(layer.n_head_kv * layer.key_length)
            n_bytes += tv.bytes_for(layer.n_head_kv * layer.value_length)
        elif layer.has_kv:
            n_bytes = tk.bytes_for(layer.k_elements) + tv.bytes_for(layer.v_elements)
        else:
            continue
        if layer.window and layer.kind in (AttentionKind.SWA, AttentionKind.CHUNKED, AttentionKind.SHARED):
            windowed[layer.window] = windowed.get(layer.window, 0) + n_bytes
        else:
            unbounded += n_bytes
    return unbounded, tuple(sorted(windowed.items()))


def kv_read_profile(shape: ModelShape, type_k: str | None = "f16",
                    type_v: str | None = "f16") -> tuple[int, tuple[tuple[int, int], ...]]:
    """How the KV read per step grows with depth n: (bytes per token at any depth, ((window, bytes per token read
    up to that window), ...)), so ``kv_bytes_in_use`` = unbounded·n + Σ bytes·min(n, window). Recurrent state does
    not grow and is not in it."""
    return _read_profile(shape, cache_type(type_k).name, cache_type(type_v).name)


def kv_bytes_in_use(shape: ModelShape, context_tokens: float, type_k: str | None = "f16",
                    type_v: str | None = "f16") -> float:
    """KV bytes one decode step reads at this context depth: SWA/chunked layers capped at their window.

    Layers that share an earlier layer's cache read it again, so they count here (but not in allocations).
    """
    n = float(context_tokens)
    n = n if n > 0 else 0.0  # also maps NaN to 0
    unbounded, windowed = _read_profile(shape, cache_type(type_k).name, cache_type(type_v).name)
    return unbounded * n + sum(n_bytes * min(n, float(window)) for window, n_bytes in windowed)


def recurrent_state_bytes(shape: ModelShape, n_seq: int = 1) -> int:
    """Fixed recurrent state (conv + SSM / WKV), f32, one copy per sequence: independent of context length."""
    per_seq = sum(layer.recurrent_elements for layer in shape.layers) * RECURRENT_STATE_BYTES_PER_ELEMENT
    return max(1, n_seq) * per_seq


def kv_allocation(
    shape: ModelShape,
    n_ctx: int,
    *,
    n_seq: int = 1,
    unified: bool = False,
    type_k: str | None = "f16",
    type_v: str | None = "f16",
    n_ubatch: int = DEFAULT_N_UBATCH,
    n_batch: int = DEFAULT_N_BATCH,
    swa_full: bool = False,
    flash_attn: bool = True,
) -> KvAllocation:
    """The KV cache llama.cpp reserves for ``-c n_ctx -np n_seq`` (``kv_unified``), K and V apart.

    Unified: one stream of pad256(n_ctx) cells. Otherwise n_seq streams of pad256(pad256(n_ctx) / n_seq) cells.
    SWA/chunked layers: pad256(min(cells, window × (unified ? n_seq : 1) + n_ubatch)) per stream, where llama.cpp
    first caps the batch at the context and the micro-batch at the batch: n_ubatch = min(n_ubatch, n_batch, n_ctx).
    Without flash attention V is stored transposed, every layer's V as wide as the widest layer's.
    ``n_ctx`` is the resolved context (llama-server's ``-c 0`` means the training context: pass that).
    """
    if n_ctx < 0:
        raise ValueError(f"negative n_ctx {n_ctx}")
    n_seq = max(1, int(n_seq))
    n_ubatch = min(n_ubatch, n_batch, n_ctx) if n_ctx else min(n_ubatch, n_batch)  # llama_context, before padding
    n_ctx = pad_cells(n_ctx)  # llama_context pads n_ctx first, then each stream's share
    if unified or n_seq == 1:
        n_streams = 1
        cells = n_ctx
    else:
        n_streams = n_seq
        cells = pad_cells(n_ctx // n_seq)
    swa_cells = 0
    k_total = v_total = swa_k = swa_v = n_kv_layers = 0
    table = _table(shape, type_k, type_v)
    v_max = _v_row_max(shape, type_v) if not flash_attn else 0
    for layer, k, v in table:
        n_kv_layers += 1
        if not flash_attn and layer.kind is not AttentionKind.MLA:
            v = v_max
        layer_cells = cells
        if layer.kind in (AttentionKind.SWA, AttentionKind.CHUNKED) and layer.window and not swa_full:
            layer_cells = pad_cells(min(cells, layer.window * (n_seq if unified else 1) + n_ubatch))
            swa_cells = max(swa_cells, layer_cells)
        elif layer.kind in (AttentionKind.SWA, AttentionKind.CHUNKED):
            swa_cells = max(swa_cells, cells)
        k_layer = k * layer_cells * n_streams
        v_layer = v * layer_cells * n_streams
        k_total += k_layer
        v_total += v_layer
        if layer.kind in (AttentionKind.SWA, AttentionKind.CHUNKED):
            swa_k += k_layer
            swa_v += v_layer
    return KvAllocation(
        cells=cells,
        swa_cells=swa_cells,
        k_bytes=k_total,
        v_bytes=v_total,
        recurrent_bytes=recurrent_state_bytes(shape, n_seq),
        n_streams=n_streams,
        n_kv_layers=n_kv_layers,
        swa_k_bytes=swa_k,
        swa_v_bytes=swa_v,
    )
