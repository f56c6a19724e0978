"""A stand-in Monitor (a test double) that makes Snapshots from a simple decode model, for the GUI tests and benches.

Not a data source: it never appears in a normal run (the demo uses the simulator over real HTTP).
"""

from __future__ import annotations

import time

from kvmon.core.snapshot import (
    Activity,
    Alert,
    AlertLevel,
    Connection,
    ConnectionStatus,
    Forecast,
    GpuView,
    HostView,
    LastDecode,
    Milestone,
    ModelView,
    SlotView,
    Snapshot,
)
from kvmon.core.verdict import decided

GIB = 1024**3


class SyntheticMonitor:
    """Polls return a conversation growing by ``tokens_per_poll``; ``fail`` makes the next polls unreachable."""

    def __init__(self, tokens_per_poll: int = 400, n_ctx: int = 32768, t0_wall: float | None = None,
                 poll_dt_s: float = 1.0, t0_monotonic: float = 0.0) -> None:
        self.seq = 0
        self.tokens_per_poll = tokens_per_poll
        self.n_ctx = n_ctx
        self.fail = False
        self.hang_s = 0.0
        self.closed = 0
        self.t0_wall = time.time() if t0_wall is None else t0_wall
        self.poll_dt_s = poll_dt_s
        self.t0_monotonic = t0_monotonic

    def snapshot(self, seq: int) -> Snapshot:
        """The snapshot of poll number ``seq`` (deterministic)."""
        ctx = min(self.n_ctx, 1200 + seq * self.tokens_per_poll)
        a, b = 0.0175, 6.0e-7
        bw = 936e9
        weights = 8.5 * GIB
        kv_per_tok = 131072
        ceiling = 2 * bw / (weights + kv_per_tok * ctx)
        decode = 1.0 / (a + b * ctx)
        curve = tuple((n, 2 * bw / (weights + kv_per_tok * n)) for n in range(0, self.n_ctx + 1, self.n_ctx // 32))
        # the forecast the analysis would draw: the decode model itself, a ±10% band under the ceiling
        forecast_curve = tuple((n, 1 / (a + b * n), 0.9 / (a + b * n), min(1.1 / (a + b * n), c)) for n, c in curve)
        kv_alloc = kv_per_tok * self.n_ctx
        left = self.n_ctx - ctx
        alerts: tuple[Alert, ...] = ()
        if left < 4000:
            alerts = (Alert(AlertLevel.WARNING, "ctx_full_soon",
                            f"context full in ~{left:,} tokens (≈ {left / decode:.0f} s at {decode:.0f} tok/s)",
                            float(left)),)
        gpus = tuple(
            GpuView(index=i, name="NVIDIA GeForce RTX 3090", vram_total_bytes=24 * GIB,
                    vram_used_bytes=int(weights / 2 + kv_alloc / 2 + 0.9 * GIB),
                    vram_free_bytes=int(24 * GIB - (weights / 2 + kv_alloc / 2 + 0.9 * GIB)),
                    weights_bytes=int(weights / 2), kv_allocated_bytes=kv_alloc // 2,
                    kv_in_use_bytes=kv_per_tok * ctx // 2, server_other_bytes=int(0.6 * GIB),
                    other_processes_bytes=int(0.3 * GIB), peak_bandwidth_bytes_per_s=bw, bandwidth_source="nvml",
                    achieved_bandwidth_bytes_per_s=decode * (weights / 2 + kv_per_tok * ctx / 2),
                    memory_busy_percent=61.0, gpu_busy_percent=88.0, pcie_rx_bytes_per_s=2.1e6,
                    pcie_tx_bytes_per_s=0.4e6, pcie_bandwidth_bytes_per_s=31.5e9)
            for i in range(2))
        t = self.t0_monotonic + seq * self.poll_dt_s
        return decided(Snapshot(
            seq=seq, t_monotonic=t, t_wall=self.t0_wall + seq * self.poll_dt_s,
            connection=Connection(ConnectionStatus.CONNECTED), backend="llama-server", server_version="b11549",
            url="http://127.0.0.1:8080",
            model=ModelView(name="Meta-Llama-3.1-8B-Instruct", arch="llama", n_params=8_030_000_000,
                            quantization="Q8_0", weight_bytes=int(weights), n_ctx=self.n_ctx, n_slots=1,
                            kv_type_k="f16", kv_type_v="f16", kv_bytes_per_token=kv_per_tok,
                            kv_allocated_bytes=kv_alloc),
            slots=(SlotView(0, self.n_ctx, ctx, True, decode),), context_tokens=ctx, decode_tok_s=decode,
            activity=Activity.DECODING,
            prefill_tok_s=(1450.0 - ctx * 0.01) if seq % 10 < 2 else None, decode_rate_source="slots",
            ceiling_tok_s=ceiling, ceiling_curve=curve,
            efficiency=decode / ceiling, kv_in_use_bytes=kv_per_tok * ctx, kv_allocated_bytes=kv_alloc,
            peak_bandwidth_bytes_per_s=bw, gpus=gpus, host=HostView(ram_total_bytes=64 * GIB,
                                                                      ram_available_bytes=40 * GIB),
            forecast=Forecast(tokens_until_ctx_full=left, seconds_until_ctx_full=left / decode, fit_a_s=a,
                              fit_b_s_per_token=b, fit_points=seq, fit_form="bandwidth+attention",
                              milestones=tuple(Milestone(m, 1 / (a + b * m)) for m in (8192, 32768)),
                              curve=forecast_curve),
            alerts=alerts,
            provenance={"decode_tok_s": "measured", "ceiling_tok_s": "computed", "context_tokens": "measured",
                        "efficiency": "computed", "server_version": "measured", "model": "measured"},
            last_decode=LastDecode(decode, t, self.t0_wall + seq * self.poll_dt_s, ctx),
        ))

    def poll(self) -> Snapshot:
        """The next snapshot (or a failure when ``fail`` is set)."""
        if self.hang_s:
            time.sleep(self.hang_s)
        self.seq += 1
        if self.fail:
            return decided(Snapshot(seq=self.seq, t_monotonic=time.monotonic(), t_wall=time.time(),
                                    connection=Connection(ConnectionStatus.UNREACHABLE, "connection refused")))
        return self.snapshot(self.seq)

    def close(self) -> None:
        """Count closes (tests check reconnects close the old monitor)."""
        self.closed += 1
