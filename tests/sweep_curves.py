"""Two configurations of one tiny model (KV f16 and q8_0) and sweeps measured on them, for the tests of comparing
curves."""

from __future__ import annotations

from dataclasses import replace

from kvmon.core.curve_config import CurveConfig
from kvmon.core.sweep import SweepResult, SweepRow

F16 = CurveConfig(backend="llama-server", server_version="b11549", model="tiny-llama-long", model_bytes=2_510_848,
                  quantization="F32", arch="llama", devices=("host",), weight_shares=(1.0,), kv_type_k="f16",
                  kv_type_v="f16", flash_attn="auto", n_ctx=16384, n_slots=1)


Q8 = replace(F16, kv_type_k="q8_0", kv_type_v="q8_0", flash_attn="on")


def _sweep(cfg: CurveConfig, speeds: list[float], t: float) -> SweepResult:
    depths = [1, 4096, 8192][:len(speeds)]
    rows = tuple(SweepRow(d, v, None, 100.0, None, None, None, 64, "server") for d, v in zip(depths, speeds,
                                                                                             strict=True))
    return SweepResult("http://127.0.0.1:1", "llama-server", "b11549", "tiny-llama-long", cfg, 64, rows,
                       ((0, 100.0), (16384, 60.0)), started_unix_s=t)
