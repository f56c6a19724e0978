"""The simulated GPUs, seen through the fake NVML (``kvmon.sim.fake_nvml``).

VRAM used = the server's CUDA context + weights + allocated KV + compute buffer on each card, plus
another application's allocation on GPU 0; PCIe traffic comes from layers in host RAM (the hidden state
crosses the link each token; prompt batches stream host layers' weights to the GPU) and from logits
going back. Utilisation, memory clock, power and temperature follow what the server is doing.
"""

from __future__ import annotations

import os
import re
import zlib

import pynvml

from kvmon.sim.engine import Activity
from kvmon.sim.fake_nvml import FakeGpu, FakeNvml
from kvmon.sim.scenarios import Scenario

OTHER_APP_PID = 4_000_001  # the "other application" holding VRAM (a pid no real process is likely to have)
IDLE_MEM_CLOCK_MHZ = 405
KB = 1024

# a throttle's reasons as NVML's clocks event bits (kvmon.sources.nvml_clocks reads them back)
REASON_BITS = {"power_cap": pynvml.nvmlClocksEventReasonSwPowerCap,
               "thermal": pynvml.nvmlClocksEventReasonSwThermalSlowdown,
               "hw_slowdown": pynvml.nvmlClocksEventReasonHwSlowdown}
_POWER_LIMIT_W = {"RTX 3090": 350, "RTX 4090": 450, "RTX 4060 Ti": 165, "RTX 5090": 575, "RTX 3060": 170}


def bus_width_bits(memory: str) -> int:
    """The bus width in a GPU table entry's memory description ("GDDR6X 19.5 Gbps, 384-bit" → 384)."""
    m = re.search(r"(\d+)-bit", memory)
    return int(m.group(1)) if m else 256


class SimGpus:
    """The scenario's GPUs as FakeGpu records inside one FakeNvml; ``refresh`` moves them with the simulation."""

    def __init__(self, scenario: Scenario) -> None:
        from kvmon.sim.model import resolve_gpu

        self.scenario = scenario
        self.spec = resolve_gpu(scenario)
        bus = bus_width_bits(self.spec.memory)
        self.mem_clock_max_mhz = round(self.spec.bandwidth_bytes_per_s / (2 * bus / 8) / 1e6)
        self.power_limit_mw = _POWER_LIMIT_W.get(self.spec.name, 300) * 1000
        self.server_pid = os.getpid()
        gpus = []
        for i in range(scenario.n_gpus if scenario.device == "cuda" else 0):  # a Mac's or a CPU box's: none
            h = zlib.crc32(f"{scenario.name}/{i}".encode())
            uuid = f"GPU-{h:08x}-{i:04x}-4{h % 4096:03x}-8{(h >> 4) % 4096:03x}-{h:08x}{i:04x}"
            gpus.append(FakeGpu(
                name=f"NVIDIA GeForce {self.spec.name}", uuid=uuid, memory_total_bytes=self.spec.vram_bytes,
                mem_clock_mhz=IDLE_MEM_CLOCK_MHZ, mem_clock_max_mhz=self.mem_clock_max_mhz, bus_width_bits=bus,
                pcie_gen=1, pcie_width=scenario.pcie_width, pcie_max_gen=scenario.pcie_gen,
                pcie_max_width=scenario.pcie_width, power_mw=25_000, power_limit_mw=self.power_limit_mw,
                temperature_c=38, energy_mj=0,
                pci_bus_id=f"00000000:{i + 1:02X}:00.0",  # as the simulated log's "using device" lines name it
            ))
        self.nvml = FakeNvml(gpus)
        self._energy_at: float | None = None  # the simulated instant the energy counters were brought up to

    def _count_energy(self, now: float | None) -> None:
        """Each GPU's energy counter moves by the power it drew since the last refresh (simulated seconds)."""
        if now is None:
            return
        last, self._energy_at = self._energy_at, now
        if last is None or now <= last:
            return
        for i, gpu in enumerate(self.nvml.gpus):
            if gpu.energy_mj is not None:
                self.nvml.update(i, energy_mj=gpu.energy_mj + round(gpu.power_mw * (now - last)))

    def refresh(self, servers: list[tuple[int, Activity]], other_vram_bytes: int, now: float | None = None) -> None:
        """Set every GPU's fields from what its model servers (pid, activity) do now and what others hold: a router's
        or llama-swap's children add up their memory; utilisation, clocks and PCIe follow the busiest one. ``now``:
        the simulated time, which moves the energy counters by the power drawn until then."""
        self._count_energy(now)
        rank = {"decode": 3, "prefill": 2, "loading": 1}
        if not servers:
            for i in range(len(self.nvml.gpus)):
                other = other_vram_bytes if i == 0 else 0
                self.nvml.update(i, memory_used_bytes=other, processes=[(OTHER_APP_PID, other)] if other else [],
                                 gpu_util_percent=0, mem_util_percent=0, mem_clock_mhz=IDLE_MEM_CLOCK_MHZ,
                                 clocks_event_reasons=pynvml.nvmlClocksEventReasonGpuIdle,
                                 pcie_gen=1, pcie_rx_kb_s=20, pcie_tx_kb_s=20, power_mw=25_000, temperature_c=38)
            return
        act = max((a for _pid, a in servers), key=lambda a: rank.get(a.phase, 0))
        throttle = self.scenario.throttle_at(now) if now is not None else None
        model = act.model
        busy = act.phase in ("prefill", "decode")
        rx_tok, tx_tok = model.pcie_decode_bytes_per_token()
        for i, gpu in enumerate(self.nvml.gpus):
            on_card = model.placement.gpu_layers[i] > 0
            procs: list[tuple[int, int | None]] = []
            for pid, a in servers:
                if i < len(a.model.placement.gpu_layers):
                    procs.append((pid, int(a.model.server_vram_bytes(i) * a.loading_fraction)))
            server = sum(int(u or 0) for _p, u in procs)
            other = other_vram_bytes if i == 0 else 0
            if other:
                procs.append((OTHER_APP_PID, other))
            total = gpu.memory_total_bytes
            used = min(total, server + other)
            if act.phase == "decode" and on_card:
                tok_s = act.decode_tok_s or 0.0
                rx, tx = rx_tok * tok_s, tx_tok * tok_s if i == len(self.nvml.gpus) - 1 else 0.0
                util, mem_util = 97, 88 if not model.partial_offload else 35
            elif act.phase == "prefill" and on_card:
                rx, tx = model.pcie_prefill_rx_bytes_per_s() + 1e5, 1e5
                util, mem_util = 99, 45
            elif act.phase == "loading":
                rx, tx = min(model.pcie_bandwidth_bytes_per_s * 0.6, 6e9), 1e5
                util, mem_util = 5, 20
            else:
                rx, tx, util, mem_util = 2e4, 2e4, 0, 0
            if model.partial_offload and busy and on_card:
                util = min(util, 30)  # the GPU waits for the CPU's layers
            power_w = (25 + (self.power_limit_mw / 1000 - 25) * (0.85 if util > 90 else util / 120.0))
            clock, reasons = (self.mem_clock_max_mhz, 0) if (busy or act.phase == "loading") else (
                IDLE_MEM_CLOCK_MHZ, pynvml.nvmlClocksEventReasonGpuIdle)
            if throttle is not None and busy:  # held down: at the cap it draws all it may
                clock = round(self.mem_clock_max_mhz * throttle.mem_clock_fraction)
                reasons = sum(REASON_BITS[r] for r in throttle.reasons)
                power_w = self.power_limit_mw / 1000
            self.nvml.update(
                i, memory_used_bytes=used, processes=procs, gpu_util_percent=util, mem_util_percent=mem_util,
                mem_clock_mhz=clock, clocks_event_reasons=reasons,
                pcie_gen=self.scenario.pcie_gen if (busy or act.phase == "loading") else 1,
                pcie_rx_kb_s=int(rx / KB), pcie_tx_kb_s=int(tx / KB),
                power_mw=int(power_w * 1000), temperature_c=int(38 + 40 * util / 100),
            )
