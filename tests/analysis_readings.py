"""Readings of a llama 3 8B on one or two GPUs, and a rate source of fixed numbers: the analysis tests' inputs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kvmon.core.readings import GpuReading, GpuSetReading, ModelInfo, ServerConfig, ServerReading, SlotReading
from kvmon.physics.presets import PRESETS
from kvmon.physics.shape import ModelShape
from kvmon.sources.backends import by_name

GIB = 1024**3


L8B = PRESETS["llama-3.1-8b"]


SHAPE_8B = ModelShape.from_gguf(L8B.metadata)


KV_PER_TOKEN_8B = 32 * 8 * 128 * 2 * 2  # layers × kv heads × head dim × (K+V) × f16 bytes = 128 KiB


@dataclass(frozen=True)
class Sample:
    decode_tok_s: float | None
    prefill_tok_s: float | None
    per_slot_decode_tok_s: Mapping[int, float | None]
    decode_rate_source: str | None


@dataclass
class FixedRates:
    """A rate tracker test double: the decode/prefill rates the test wants, per poll."""

    decode: float | None = None
    prefill: float | None = None
    per_slot: Mapping[int, float | None] = field(default_factory=dict)

    def update(self, reading: ServerReading) -> Sample:
        return Sample(self.decode, self.prefill, dict(self.per_slot), "slots" if self.decode is not None else None)


def reading(t: float = 0.0, ctx: int | None = 8192, *, n_ctx: int = 32768, processing: bool = True,
            model: ModelInfo | None = None, config: ServerConfig | None = None, backend: str = "llama-server",
            slots: tuple[SlotReading, ...] | None = None, **kw: object) -> ServerReading:
    model = model or ModelInfo(name="Llama-3.1-8B-Q4_K_M.gguf", arch="llama", weight_bytes=L8B.weight_bytes,
                               shape=SHAPE_8B)
    if slots is None:
        slots = (SlotReading(id=0, n_ctx=n_ctx, context_tokens=ctx, processing=processing),)
    return ServerReading(t_monotonic=t, t_wall=1.8e9 + t, backend=by_name(backend), url="http://127.0.0.1:8080",
                         model=model,
                         slots=slots, total_slots=len(slots), metrics_enabled=True,
                         config=config or ServerConfig(n_ctx_total=n_ctx, n_parallel=1), **kw)  # type: ignore[arg-type]


def gpu(index: int = 0, *, name: str = "NVIDIA GeForce RTX 4090", bw: float | None = 1008e9, free: int = 12 * GIB,
        total: int = 24 * GIB, server: int | None = 10 * GIB, others: int | None = 1 * GIB, **kw: object) -> GpuReading:
    return GpuReading(index=index, name=name, vram_total_bytes=total, vram_used_bytes=total - free,
                      vram_free_bytes=free, peak_bandwidth_bytes_per_s=bw, bandwidth_source="table" if bw else None,
                      server_used_bytes=server, other_processes_used_bytes=others, **kw)  # type: ignore[arg-type]


def gpus(t: float = 0.0, *g: GpuReading) -> GpuSetReading:
    return GpuSetReading(t_monotonic=t, gpus=g or (gpu(),))


def ceiling_8b(ctx: int, bw: float = 1008e9) -> float:
    return bw / (L8B.weight_bytes + KV_PER_TOKEN_8B * ctx)
