"""The configuration one poll measured on (``kvmon.core.curve_config.CurveConfig``), from the Snapshot's parts."""

from __future__ import annotations

from collections.abc import Sequence

from kvmon.core.curve_config import SHARE_STEP, CurveConfig
from kvmon.core.snapshot import GpuView, HostView, ModelView, Snapshot


def config_of(backend: str | None, server_version: str | None, model: ModelView, gpus: Sequence[GpuView],
              host: HostView) -> CurveConfig | None:
    """The configuration one poll measured on; None while no model is named (nothing to file a point under)."""
    if model.name is None or model.n_ctx is None:
        return None
    held = [(g.name or f"GPU {g.index}", float(g.weights_bytes or 0)) for g in gpus if g.weights_bytes]
    if host.weights_in_host_bytes:
        held.append(("host", float(host.weights_in_host_bytes)))
    total = sum(b for _d, b in held) or 1.0
    return CurveConfig(
        backend=str(backend) if backend else None, server_version=server_version, model=model.name,
        model_bytes=model.weight_bytes, quantization=model.quantization, arch=model.arch,
        devices=tuple(d for d, _b in held),
        weight_shares=tuple(round(round(b / total / SHARE_STEP) * SHARE_STEP, 2) for _d, b in held),
        kv_type_k=model.kv_type_k, kv_type_v=model.kv_type_v, flash_attn=model.flash_attn, n_ctx=model.n_ctx,
        n_slots=model.n_slots)


def snapshot_config(s: Snapshot) -> CurveConfig | None:
    """``config_of`` a whole Snapshot (None when it did not read the server)."""
    if not s.server_read:
        return None
    return config_of(s.backend, s.server_version, s.model, s.gpus, s.host)
