"""Alerts that hold while their condition holds: full VRAM stays a warning until it frees, a model that failed to
load stays a warning while the router lists it so, and one cause is one alert."""

from __future__ import annotations

import pytest

from kvmon.core.analysis import Analyzer
from kvmon.core.readings import (
    GpuReading,
    GpuSetReading,
    ModelInfo,
    ServerConfig,
    ServerReading,
    SlotReading,
)
from kvmon.core.snapshot import AlertLevel, Snapshot, VerdictLevel
from kvmon.physics.presets import PRESETS
from kvmon.physics.shape import ModelShape
from kvmon.sources.backends import by_name

GIB, MIB = 1024**3, 1024**2
L8B = PRESETS["llama-3.1-8b"]


class Rates:
    """Decoding for 30 s, then idle for 30 s, over and over: a chat beside kvmon."""

    def update(self, r: ServerReading) -> object:
        from types import SimpleNamespace

        d = 60.0 if int(r.t_monotonic) % 60 < 30 else None
        return SimpleNamespace(decode_tok_s=d, prefill_tok_s=None, per_slot_decode_tok_s={0: d},
                               decode_rate_source="slots" if d is not None else None)


def reading(t: float) -> ServerReading:
    model = ModelInfo(name="Llama-3.1-8B-Q4_K_M.gguf", arch="llama", weight_bytes=L8B.weight_bytes,
                      shape=ModelShape.from_gguf(L8B.metadata))
    return ServerReading(t_monotonic=t, t_wall=1.8e9 + t, backend=by_name("llama-server"),
                         url="http://127.0.0.1:8080", model=model,
                         slots=(SlotReading(id=0, n_ctx=32768, context_tokens=4000 + int(t), processing=True),),
                         total_slots=1, metrics_enabled=True, config=ServerConfig(n_ctx_total=32768, n_parallel=1))


def gpus(t: float, free: int) -> GpuSetReading:
    total, server = 24 * GIB, 10 * GIB
    return GpuSetReading(t_monotonic=t, gpus=(GpuReading(
        index=0, name="NVIDIA GeForce RTX 4090", vram_total_bytes=total, vram_used_bytes=total - free,
        vram_free_bytes=free, peak_bandwidth_bytes_per_s=1008e9, bandwidth_source="table", server_used_bytes=server,
        other_processes_used_bytes=total - free - server),))


def full_vram(s: Snapshot) -> list[str]:
    return [a.message for a in s.alerts if a.code == "vram_full" and a.level is AlertLevel.WARNING]


def test_a_plateau_of_full_vram_stays_a_warning_until_it_frees() -> None:
    """Five minutes of VRAM full while the chat decodes and pauses: the warning stands every poll, and names what
    would spill; it goes once VRAM frees past its clear mark (after its hold), not before."""
    a = Analyzer(rate_tracker=Rates())
    seen = [a.update(reading(float(t)), gpus(float(t), 160 * MIB)) for t in range(0, 300)]
    assert all(full_vram(s) for s in seen), [s.t_monotonic for s in seen if not full_vram(s)][:5]
    (msg,) = full_vram(seen[-1])
    assert msg.startswith("VRAM full on GPU 0 (NVIDIA GeForce RTX 4090): 160 MiB free of 24.0 GiB; other programs hold")
    assert "A reload, a larger -c or another model would put layers and KV cache in host RAM" in msg
    assert all(s.verdict is not None and s.verdict.level is VerdictLevel.WARNING and s.verdict.state == "VRAM full"
               for s in seen)
    assert seen[-1].verdict is not None
    assert seen[-1].verdict.sentence == "VRAM full on GPU 0: a reload or a longer context spills to host RAM"
    # a little freed (under the clear mark): still full; then VRAM frees: gone, and the headline calm again
    still = [a.update(reading(t), gpus(t, 800 * MIB)) for t in range(300, 330)]
    assert all(full_vram(s) for s in still)
    freed = a.update(reading(330), gpus(330, 6 * GIB))
    assert not full_vram(freed) and freed.verdict is not None and freed.verdict.level is VerdictLevel.OK


def test_free_vram_falling_into_full_is_one_alert() -> None:
    """Free VRAM falls to nothing: "VRAM full soon" while it falls, then "VRAM full", never both at once."""
    a = Analyzer(rate_tracker=Rates())
    codes = []
    for t in range(0, 240):
        free = max(160 * MIB, int(8 * GIB - t * 60 * MIB))
        s = a.update(reading(float(t)), gpus(float(t), free))
        got = {x.code for x in s.alerts} & {"vram_full_soon", "vram_full"}
        assert len(got) <= 1, (t, got)
        codes.append(got)
    assert {"vram_full_soon"} in codes and codes[-1] == {"vram_full"}


@pytest.mark.parametrize("start", [80.0])
def test_a_router_model_that_failed_to_load_stays_a_warning(start: float) -> None:
    """The router's broken model fails at ~77 s: a warning with its name and exit status on every poll after, while
    the router lists it as failed, whichever model is shown."""
    from kvmon.app.demo import demo_session, step_demo

    session = demo_session("router", None, start_at_s=start, stepped=True)
    try:
        snaps = list(step_demo(session, 60.0, 2.0))
    finally:
        session.close()
    for s in snaps:
        failed = [a for a in s.alerts if a.code == "model_failed"]
        assert [a.level for a in failed] == [AlertLevel.WARNING], (s.t_monotonic, [a.code for a in s.alerts])
        assert failed[0].message.startswith("broken-model failed to load (exit status 1)")
        assert s.verdict is not None and s.verdict.level is VerdictLevel.WARNING
        assert s.verdict.sentence == "broken-model failed to load (exit status 1)"
