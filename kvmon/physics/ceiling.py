"""The memory-bandwidth ceiling on decode speed and its inverses (context that fits, tokens left).

Per token each device reads its weights and its share of the KV cache; devices of a layer split run one
after the other, so their times add: tok/s ≤ 1 / Σ_d (weight_bytes_d + kv_bytes × kv_fraction_d) / bandwidth_d.
Bytes held in host RAM count at host bandwidth (CPU layers) or at PCIe bandwidth (streamed): the spill cliff.
With speculative decoding one target step reads the same bytes and yields the tokens it accepts plus its own, so
the ceiling is that many times higher (a draft model's own reads would lower it again).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from kvmon.physics.kv import CELL_PADDING, kv_allocation, kv_bytes_in_use
from kvmon.physics.shape import ModelShape

Location = Literal["gpu", "host", "pcie"]

MAX_CONTEXT_SEARCH_TOKENS = 1 << 24  # search bound when the model's training context is unknown


@dataclass(frozen=True)
class DeviceShare:
    """One device's part of a decode step: the weight bytes it reads, its fraction of the KV, its bandwidth."""

    name: str
    bandwidth_bytes_per_s: float | None
    weight_bytes: float
    kv_fraction: float
    location: Location = "gpu"


def _valid(devices: Sequence[DeviceShare]) -> bool:
    if not devices:
        return False
    for d in devices:
        bw = d.bandwidth_bytes_per_s
        if bw is None or not math.isfinite(bw) or bw <= 0:
            return False
        if d.weight_bytes < 0 or d.kv_fraction < 0 or not math.isfinite(d.weight_bytes):
            return False
    return True


def step_time_parts(devices: Sequence[DeviceShare]) -> tuple[float, float] | None:
    """(seconds reading the weights, seconds per byte of KV) of one decode step at peak bandwidth; None if unknown.

    A step at a depth where it reads ``kv`` bytes of KV takes ``weights_s + kv × kv_s_per_byte``.
    """
    if not _valid(devices):
        return None
    weights_s = kv_s_per_byte = 0.0
    for d in devices:
        bw = d.bandwidth_bytes_per_s
        if bw is None:  # _valid has ruled this out
            return None
        weights_s += d.weight_bytes / float(bw)
        kv_s_per_byte += d.kv_fraction / float(bw)
    return weights_s, kv_s_per_byte


def step_time_s(devices: Sequence[DeviceShare], kv_bytes_read: float) -> float | None:
    """Seconds one decode step spends reading memory, or None when a bandwidth is unknown."""
    parts = step_time_parts(devices)
    if parts is None or kv_bytes_read < 0 or not math.isfinite(kv_bytes_read):
        return None
    return parts[0] + kv_bytes_read * parts[1]


def ceiling_tok_s(devices: Sequence[DeviceShare], kv_bytes_read: float) -> float | None:
    """Decode tok/s the memory bus allows when each step reads ``kv_bytes_read`` of KV; None if unknown."""
    t = step_time_s(devices, kv_bytes_read)
    if t is None or t <= 0:
        return None
    return 1.0 / t


def speculative_tokens_per_step(generated_tokens: float, accepted_tokens: float) -> float | None:
    """Tokens a speculative target step yields on average: each step makes one token of its own plus the drafted
    tokens it accepts, so steps = generated − accepted and tokens per step = generated ÷ steps. None when the
    counts do not allow it (nothing generated, or more accepted than generated)."""
    if not (math.isfinite(generated_tokens) and math.isfinite(accepted_tokens)):
        return None
    steps = generated_tokens - accepted_tokens
    if generated_tokens <= 0 or accepted_tokens < 0 or steps <= 0:
        return None
    return generated_tokens / steps


def speculative_ceiling(one_token_tok_s: float, tokens_per_step: float, drafted_per_step: float,
                        draft_bytes_per_token: float, target_bytes_per_token: float) -> float | None:
    """What the bus allows with speculation: a target step takes the one-token step's time (its weights and KV,
    read once) plus a read of the draft's weights for each drafted token, at the same rate per byte as the target's,
    and yields ``tokens_per_step`` tokens. None when an input is not a positive, finite number."""
    vals = (one_token_tok_s, tokens_per_step, target_bytes_per_token)
    if not all(math.isfinite(v) and v > 0 for v in vals) or not (
            math.isfinite(drafted_per_step) and drafted_per_step >= 0 and math.isfinite(draft_bytes_per_token)
            and draft_bytes_per_token >= 0):
        return None
    target_step_s = 1.0 / one_token_tok_s
    draft_s = drafted_per_step * draft_bytes_per_token * target_step_s / target_bytes_per_token
    return tokens_per_step / (target_step_s + draft_s)


def ceiling_curve(
    devices: Sequence[DeviceShare],
    shape: ModelShape,
    type_k: str | None,
    type_v: str | None,
    contexts: Iterable[int],
) -> tuple[tuple[int, float], ...]:
    """(context, ceiling tok/s) for each context depth; empty when the ceiling is unknown."""
    out: list[tuple[int, float]] = []
    for n in contexts:
        tok_s = ceiling_tok_s(devices, kv_bytes_in_use(shape, n, type_k, type_v))
        if tok_s is None:
            return ()
        out.append((int(n), tok_s))
    return tuple(out)


def max_context_fitting(
    shape: ModelShape,
    free_bytes: float,
    *,
    type_k: str | None = "f16",
    type_v: str | None = "f16",
    n_seq: int = 1,
    unified: bool = False,
    n_ubatch: int = 512,
    limit_tokens: int | None = None,
) -> int:
    """Largest n_ctx (a multiple of 256 per stream) whose KV allocation fits in ``free_bytes``; 0 if none.

    Searched up to ``limit_tokens`` (default: the model's training context, else 16M tokens).
    """
    limit = limit_tokens if limit_tokens is not None else (shape.n_ctx_train or MAX_CONTEXT_SEARCH_TOKENS)
    if free_bytes <= 0 or limit <= 0:
        return 0
    n_seq = max(1, n_seq)
    streams = 1 if unified or n_seq == 1 else n_seq
    step = CELL_PADDING * streams

    def fits(n_ctx: int) -> bool:
        a = kv_allocation(shape, n_ctx, n_seq=n_seq, unified=unified, type_k=type_k, type_v=type_v,
                          n_ubatch=n_ubatch)
        return a.total_bytes <= free_bytes

    lo, hi = 0, limit // step  # in units of step; allocation is monotone in n_ctx
    if hi == 0 or not fits(step):
        return 0
    if fits(hi * step):
        return hi * step
    lo = 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid * step):
            lo = mid
        else:
            hi = mid
    return lo * step


def tokens_until_full(n_ctx: int, context_tokens: int) -> int:
    """Tokens that still fit in a slot of ``n_ctx`` holding ``context_tokens`` (never negative)."""
    return max(0, int(n_ctx) - int(context_tokens))
