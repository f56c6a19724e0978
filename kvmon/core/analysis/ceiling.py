"""The ceiling: the decode speed the memory bus allows now and over every depth up to n_ctx, and the bandwidth figures
that follow (bytes read per token, achieved and peak bandwidth, headroom). Which of its inputs is suspect when a
measured speed exceeds it is decided with the other contradictions, in ``kvmon.core.analysis.consistency``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvmon.core.analysis.notes import Notes
from kvmon.core.readings import Provenance
from kvmon.core.snapshot import ModelView
from kvmon.physics import ceiling as ceiling_mod


def curve_depths(n_ctx: int, n_points: int) -> list[int]:
    """The depths the ceiling curve and the forecast curve are sampled at: ``n_points`` evenly up to ``n_ctx``."""
    n = max(2, n_points)
    return sorted({round(n_ctx * i / (n - 1)) for i in range(n)})


def ceiling(devices: list[Any] | None, devices_reason: str | None, shape: Any, model: ModelView,
            kv_read_now: float | None, type_k: str, type_v: str, curve_points: int,
            shape_why: str | None) -> tuple[float | None, tuple[tuple[int, float], ...], Notes]:
    """(tok/s the bus allows at this depth, the curve (depth, tok/s) up to n_ctx); None / () when unknown.
    ``shape_why``: why the KV bytes per token are unknown, if they are."""
    ceiling_now = None
    curve: tuple[tuple[int, float], ...] = ()
    if devices is not None and shape is not None:
        if kv_read_now is not None:
            ceiling_now = ceiling_mod.ceiling_tok_s(devices, kv_read_now)
            notes = Notes({"ceiling_tok_s": Provenance.COMPUTED})
        else:
            notes = Notes(reasons={"ceiling_tok_s": "context depth unknown: the ceiling curve shows every depth"})
        if model.n_ctx:
            depths = curve_depths(model.n_ctx, max(2, curve_points))
            curve = tuple(ceiling_mod.ceiling_curve(devices, shape, type_k, type_v, depths))
    else:
        notes = Notes(reasons={"ceiling_tok_s": devices_reason or shape_why or "model shape unknown"})
    return ceiling_now, curve, notes


def batch_ceiling(devices: list[Any] | None, kv_in_use_bytes: int | None, n_running: int | None
                  ) -> tuple[float | None, Notes]:
    """All running requests of a pooled KV cache (vLLM) decoding together: each engine step reads the weights once
    and every request's KV, and gives each request one token, so the bus allows n / step time tokens a second."""
    if devices is None or kv_in_use_bytes is None or not n_running or n_running < 2:
        return None, Notes()
    one_step = ceiling_mod.ceiling_tok_s(devices, float(kv_in_use_bytes))
    if one_step is None:
        return None, Notes()
    why = (f"for the {n_running} requests decoding together: each step reads the weights once and all their KV "
           "cache (one conversation's depth is not reported)")
    return one_step * n_running, Notes({"ceiling_tok_s": Provenance.COMPUTED}, {"ceiling_tok_s": why})


def step_shares(devices: list[Any] | None, kv_read_now: float | None) -> dict[str, float]:
    """Each device's share of a token's step at the ceiling (its bytes over its bandwidth, over all of theirs): layers
    split over devices run one after the other, so a device is busy for its share and reads at its own rate then."""
    if not devices or kv_read_now is None:
        return {}
    times = {d.name: (d.weight_bytes + d.kv_fraction * kv_read_now) / d.bandwidth_bytes_per_s for d in devices
             if d.bandwidth_bytes_per_s}
    total = sum(times.values())
    return {name: t / total for name, t in times.items()} if total > 0 else {}


@dataclass(frozen=True)
class Bandwidth:
    """Bytes one token reads, the bandwidth the measured speed implies, the peak at the ceiling, the headroom."""

    bytes_per_token: float | None = None
    achieved: float | None = None
    peak: float | None = None
    headroom: float | None = None


def bandwidth(decode: float | None, weights_read: float | None, kv_read_now: float | None, ceiling_now: float | None,
              ) -> tuple[Bandwidth, Notes]:
    """The bandwidth figures of this poll (computed from the speeds and the bytes per token). ``weights_read``: the
    weight bytes a token reads where the model lives (``placement.weights_read``), as the ceiling counts them, so
    that achieved ÷ peak is decode ÷ ceiling."""
    bytes_per_token = None
    if weights_read is not None and kv_read_now is not None:
        bytes_per_token = weights_read + kv_read_now
    achieved = decode * bytes_per_token if decode is not None and bytes_per_token is not None else None
    peak = bytes_per_token * ceiling_now if bytes_per_token is not None and ceiling_now else None
    headroom = 1.0 - achieved / peak if achieved is not None and peak else None
    computed = {k: Provenance.COMPUTED for k, v in (("peak_bandwidth_bytes_per_s", peak),
                                                   ("achieved_bandwidth_bytes_per_s", achieved)) if v is not None}
    return Bandwidth(bytes_per_token, achieved, peak, headroom), Notes(computed)
