"""A Snapshot with every section filled, for the tests of what reads and writes recordings."""

from __future__ import annotations

import math

from kvmon.core.snapshot import (
    Alert,
    AlertLevel,
    Connection,
    ConnectionStatus,
    Forecast,
    GpuView,
    HostView,
    Milestone,
    ModelView,
    SlotView,
    Snapshot,
)


def rich_snapshot(seq: int = 7) -> Snapshot:
    return Snapshot(
        seq=seq, t_monotonic=1234.5678901234, t_wall=1_790_000_000.123456,
        connection=Connection(ConnectionStatus.CONNECTED, None, 12.0),
        backend="llama-server", server_version="b11549", url="http://127.0.0.1:8080",
        model=ModelView(name="m.gguf", arch="llama", n_params=8_030_261_248, weight_bytes=4_920_000_000,
                        weight_bytes_read_per_token=4.92e9, n_ctx=32768, kv_type_k="q8_0", kv_type_v="q8_0",
                        kv_unified=False, kv_bytes_per_token=69632.0, kv_allocated_bytes=2_281_701_376),
        slots=(SlotView(0, 32768, 8432, True, 61.25), SlotView(1, 32768, None, False, None)),
        context_tokens=8432, decode_tok_s=61.25, prefill_tok_s=None, decode_rate_source="slots",
        ceiling_tok_s=167.29737600385863, ceiling_curve=((0, 204.8780487804878), (32768, 109.38725744990425)),
        efficiency=0.1 + 0.2, kv_in_use_bytes=1_105_199_104,
        gpus=(GpuView(index=0, name="NVIDIA GeForce RTX 4090", vram_total_bytes=25_769_803_776,
                      peak_bandwidth_bytes_per_s=1.008e12, power_w=math.nan,
                      reasons={"power_w": "not supported"}),),
        host=HostView(ram_total_bytes=64 * 1024**3),
        forecast=Forecast(tokens_until_ctx_full=24336, seconds_until_ctx_full=math.inf, fit_points=4,
                          milestones=(Milestone(8192, 60.0, 56.6, 63.8, 168.2),)),
        alerts=(Alert(AlertLevel.WARNING, "ctx_full_soon", "Context full in ~2,300 tokens", 2300.0),),
        provenance={"decode_tok_s": "measured"}, reasons={"prefill_tok_s": "idle"},
        extra={"placement": "single_gpu", "n": [1, 2]},
    )
