"""The simulated machine's unified memory and host RAM, as test doubles of kvmon's device and host sources.

``SimUnifiedMemory`` answers like ``kvmon.sources.apple.AppleSource`` on a Mac with ``pyobjc-framework-Metal``: one
unified-memory device holding the server's weights and caches, with Metal's working-set limit. ``SimHost`` answers
like ``kvmon.sources.host.HostSource`` for the simulated machine: its RAM (the server's share follows the model),
and its memory bandwidth as the one-time probe would have measured it. Both read the simulation's clock and state;
they return plain readings (``kvmon.core.readings``) and never look at the real machine.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

from kvmon.core.readings import DeviceKind, GpuReading, GpuSetReading, HostReading
from kvmon.sim.permit import require

OTHER_RAM_BYTES = 6 * 1024**3  # what the simulated machine's other programs hold (desktop, browser)


def _server_bytes(sim: Any) -> int:
    """The model server's memory on the simulated machine now: weights, caches, compute buffers (as loaded)."""
    act = sim.engine.activity(sim.clock.now())
    m = act.model
    held = m.weight_bytes + m.kv_allocated_bytes + int(m.allocation.recurrent_bytes or 0)
    held += sim.scenario.compute_buffer_bytes
    return int(held * act.loading_fraction)


class SimUnifiedMemory:
    """The simulated Mac's unified memory as one device (a double of the Apple device source)."""

    def __init__(self, sim: Any) -> None:
        require("SimUnifiedMemory")
        self.sim = sim

    def poll(self, server_pids: Collection[int] = ()) -> GpuSetReading:
        s = self.sim.scenario
        total = s.host_ram_bytes
        used = min(total, _server_bytes(self.sim) + OTHER_RAM_BYTES)
        act = self.sim.engine.activity(self.sim.clock.now())
        spec = act.model.gpu
        dev = GpuReading(
            index=0, name=spec.name, vram_total_bytes=total, vram_used_bytes=used, vram_free_bytes=total - used,
            peak_bandwidth_bytes_per_s=spec.bandwidth_bytes_per_s, bandwidth_source="table",
            gpu_busy_percent=97.0 if act.phase in ("decode", "prefill") else 0.0,
            kind=DeviceKind.UNIFIED_MEMORY.value, vendor="apple", source="apple", vendor_index=0,
            working_set_limit_bytes=act.model.device_memory_bytes(), working_set_source="metal", spill_used_bytes=0,
            reasons={"server_used_bytes": "macOS tells no other process how much GPU memory the model server holds",
                     "other_processes_used_bytes": "macOS tells no other process how much GPU memory others hold"},
        )
        return GpuSetReading(t_monotonic=self.sim.clock.now(), gpus=(dev,))

    def close(self) -> None:
        """Nothing to release."""


class SimHost:
    """The simulated machine's RAM, swap and memory bandwidth (a double of the host source)."""

    def __init__(self, sim: Any) -> None:
        require("SimHost")
        self.sim = sim
        self._measured_at = time.time() - 86_400.0  # as if the probe had run yesterday

    def poll(self, server_pids: Collection[int] = ()) -> HostReading:
        s = self.sim.scenario
        server = _server_bytes(self.sim) if s.device != "cuda" else self._host_resident()
        used = min(s.host_ram_bytes, server + OTHER_RAM_BYTES)
        return HostReading(
            t_monotonic=self.sim.clock.now(), ram_total_bytes=s.host_ram_bytes,
            ram_available_bytes=s.host_ram_bytes - used, swap_total_bytes=8 * 1024**3, swap_used_bytes=0,
            server_rss_bytes=server, host_bandwidth_bytes_per_s=s.host_bandwidth_bytes_per_s,
            host_bandwidth_source="measured", host_bandwidth_measured_at_unix_s=self._measured_at,
            memory_type=s.memory_type, cpu_name=s.cpu_name,
        )

    def _host_resident(self) -> int:
        """With GPUs, what the server keeps in host RAM: its CPU layers, their KV and the token embeddings."""
        m = self.sim.engine.activity(self.sim.clock.now()).model
        return int(m.placement.weight_bytes_host + m.placement.kv_bytes_host + m.host_embedding_bytes)

    def close(self) -> None:
        """Nothing to release."""
