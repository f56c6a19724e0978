"""Timing and memory of one loaded model in the simulator, computed with ``kvmon.physics``.

``LoadedModel`` places layers on the scenario's GPUs (and on the CPU when they do not fit, as
llama.cpp's ``--fit`` does), then answers: seconds per decode step at context depth n, seconds to
prefill a prompt, bytes on each GPU, and PCIe bytes moved. The efficiency curve is calibrated so that
the speeds at the scenario's anchor depths come out as measured (see ``kvmon.sim.scenarios``) on the scenario's own
load (its n_ctx, with the other VRAM of its start); a later load (a reload with another n_ctx, layers moved to the
CPU) keeps that efficiency and overhead on its own roofline. No step is ever faster than the roofline: the
simulated server never beats its own memory bus, noise or not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvmon.physics.gpus import GpuSpec, lookup_gpu, pcie_bandwidth_bytes_per_s
from kvmon.physics.tensors import parameter_count, tensor_inventory
from kvmon.sim.quantize import TypedTensor, quantize
from kvmon.sim.scenarios import Scenario


class SimSetupError(ValueError):
    """A scenario names a model preset or GPU kvmon's tables do not know."""


def resolve_preset(scenario: Scenario) -> Any:
    """The first of the scenario's preset keys present in ``kvmon.physics.presets.PRESETS``."""
    from kvmon.physics.presets import PRESETS

    for key in scenario.preset_keys:
        if key in PRESETS:
            return PRESETS[key]
    raise SimSetupError(
        f"scenario {scenario.name!r}: none of the model presets {scenario.preset_keys} exist "
        f"(known: {', '.join(sorted(PRESETS))})"
    )


def resolve_gpu(scenario: Scenario) -> GpuSpec:
    """The scenario's GPU from the one GPU table; a CPU-only machine's "GPU" is its RAM (the host's bandwidth)."""
    if scenario.device == "cpu":
        return GpuSpec("CPU", scenario.host_bandwidth_bytes_per_s, scenario.host_ram_bytes, scenario.memory_type)
    spec = lookup_gpu(scenario.gpu_name)
    if spec is None:
        raise SimSetupError(f"scenario {scenario.name!r}: GPU {scenario.gpu_name!r} is not in kvmon's GPU table")
    return spec


def model_tensors(metadata: Any, file_type: str) -> tuple[TypedTensor, ...] | None:
    """The model's tensors typed as a ``file_type`` file holds them; None for an architecture kvmon has no inventory
    of (the preset's file size then stands for the weights)."""
    inv = tensor_inventory(metadata)
    return quantize(inv, file_type, metadata) if inv is not None else None


@dataclass(frozen=True)
class Placement:
    """Where the layers went at load: per-GPU layer counts, layers on the CPU, and bytes per device."""

    gpu_layers: tuple[int, ...]
    cpu_layers: int
    weight_bytes_gpu: tuple[int, ...]
    kv_bytes_gpu: tuple[int, ...]
    weight_bytes_host: int
    kv_bytes_host: int


class LoadedModel:
    """One load of the scenario's model with ``n_ctx`` cells; ``other_vram_bytes`` is what others hold then."""

    def __init__(self, scenario: Scenario, n_ctx: int, other_vram_bytes: int = 0) -> None:
        from kvmon.physics.kv import kv_allocation
        from kvmon.physics.shape import ModelShape
        from kvmon.physics.weights import weight_bytes_read_per_token

        self.scenario = scenario
        self.preset = resolve_preset(scenario)
        self.gpu = resolve_gpu(scenario)
        self.shape = ModelShape.from_gguf(self.preset.metadata)
        # the checkpoint's tensors with their types (sizes as the file holds them), where kvmon knows the
        # architecture's inventory; else the preset's file size stands for them
        self.quantization = scenario.weights_type or str(self.preset.quantization)
        self.tensors = model_tensors(self.preset.metadata, self.quantization)
        self.weight_bytes = (sum(t.n_bytes for t in self.tensors) if self.tensors is not None
                             else int(self.preset.weight_bytes))
        self.n_params = parameter_count(self.preset.metadata)
        self.n_ctx = n_ctx
        self.n_layers = self.shape.n_layers
        self.allocation = kv_allocation(
            self.shape, n_ctx, n_seq=scenario.n_parallel, unified=False,
            type_k=scenario.type_k, type_v=scenario.type_v,
        )
        self.kv_allocated_bytes = int(self.allocation.total_bytes)
        # a token reads one row of the token-embedding table, so the table is not part of the weights read; a model
        # whose output head is that same matrix reads all of it each token (llama.cpp puts a copy beside the last
        # layer: simplified here to the one matrix, counted as read). llama.cpp keeps the table in host memory,
        # vLLM on the GPU with the rest
        if self.tensors is not None:
            tied = not any(t.name == "output.weight" for t in self.tensors)
            self.embedding_bytes = 0 if tied else next(t.n_bytes for t in self.tensors
                                                       if t.name == "token_embd.weight")
        else:
            n_params = float(self.n_params or self.weight_bytes * 8 / 4.85)
            bits_per_weight = self.weight_bytes * 8 / n_params
            vocab = self.shape.vocab_size or 32000
            self.embedding_bytes = int(min(0.25 * self.weight_bytes,
                                           vocab * self.shape.n_embd * bits_per_weight / 8))
        read = float(weight_bytes_read_per_token(self.shape, self.weight_bytes).bytes)
        self.weight_read_bytes = max(0.0, read - self.embedding_bytes)
        self.host_embedding_bytes = self.embedding_bytes if scenario.embeddings_in_host else 0
        self.pcie_bandwidth_bytes_per_s = pcie_bandwidth_bytes_per_s(scenario.pcie_gen, scenario.pcie_width) or 25e9
        self.placement = self._place(other_vram_bytes)
        self._devices = self._device_shares()
        if n_ctx == scenario.n_ctx and other_vram_bytes == scenario.other_vram_bytes(0.0):
            self._e0, self._overhead = self._calibrate()
        else:  # calibrated on the scenario's own load, kept for this one
            ref = LoadedModel(scenario, scenario.n_ctx, scenario.other_vram_bytes(0.0))
            self._e0, self._overhead = ref._e0, ref._overhead

    # -- placement --------------------------------------------------------------------------------------
    def _place(self, other_vram_bytes: int) -> Placement:
        s = self.scenario
        layer_weights = self.weight_bytes - self.host_embedding_bytes
        per_layer = (layer_weights + self.kv_allocated_bytes) / self.n_layers
        free = self.device_memory_bytes() - s.cuda_context_bytes - s.compute_buffer_bytes  # on each GPU, less others
        capacity = [max(0, int((free - (other_vram_bytes if i == 0 else 0)) // per_layer)) for i in range(s.n_gpus)]
        wanted = self.n_layers if s.n_gpu_layers is None else min(self.n_layers, s.n_gpu_layers)
        # llama.cpp splits layers in proportion to free memory; equal cards get equal shares
        layers = [0] * s.n_gpus
        remaining = wanted
        for i in range(s.n_gpus):
            share = math.ceil(remaining / (s.n_gpus - i))
            layers[i] = min(capacity[i], share)
            remaining -= layers[i]
        for i in range(s.n_gpus):  # a card that had less room leaves layers for the next one
            extra = min(remaining, capacity[i] - layers[i])
            layers[i] += extra
            remaining -= extra
        cpu = self.n_layers - sum(layers)
        w_layer = layer_weights / self.n_layers
        kv_layer = self.kv_allocated_bytes / self.n_layers
        return Placement(
            gpu_layers=tuple(layers), cpu_layers=cpu,
            weight_bytes_gpu=tuple(int(n * w_layer) for n in layers),
            kv_bytes_gpu=tuple(int(n * kv_layer) for n in layers),
            weight_bytes_host=int(cpu * w_layer), kv_bytes_host=int(cpu * kv_layer),
        )

    def _device_shares(self) -> list[Any]:
        from kvmon.physics.ceiling import DeviceShare

        p = self.placement
        held = [(f"CUDA{i}", self.gpu.bandwidth_bytes_per_s, n) for i, n in enumerate(p.gpu_layers) if n]
        held += [("CPU", self.scenario.host_bandwidth_bytes_per_s, p.cpu_layers)] if p.cpu_layers else []
        return [DeviceShare(name, bw, self.weight_read_bytes * (n / self.n_layers), n / self.n_layers,
                            "host" if name == "CPU" else "gpu") for name, bw, n in held]

    def device_memory_bytes(self) -> int:
        """What one device can hold: its VRAM, or on unified memory what Metal lets the GPU wire."""
        if self.scenario.device == "metal":
            return int(self.scenario.host_ram_bytes * self.scenario.working_set_fraction)
        return self.gpu.vram_bytes

    @property
    def partial_offload(self) -> bool:
        """Some layers on GPUs and some on the CPU (a CPU-only machine offloads nothing: it is not partial)."""
        return self.placement.cpu_layers > 0 and any(self.placement.gpu_layers)

    # -- timing -----------------------------------------------------------------------------------------
    def roofline_step_s(self, depths: np.ndarray) -> np.ndarray:
        """Seconds per decode step from memory traffic alone (1 / ceiling) at each depth."""
        from kvmon.physics.ceiling import ceiling_tok_s
        from kvmon.physics.kv import kv_bytes_in_use

        s = self.scenario
        out = np.empty(len(depths))
        for j, n in enumerate(depths):
            kv = kv_bytes_in_use(self.shape, int(n), s.type_k, s.type_v)
            tok_s = ceiling_tok_s(self._devices, kv)
            out[j] = 1.0 / tok_s if tok_s else math.inf
        return out

    def _calibrate(self) -> tuple[float, float]:
        """Efficiency at empty context and attention overhead per token of depth, from the anchors."""
        s = self.scenario
        e0, overhead = s.efficiency_at_empty, s.attention_overhead_s_per_token
        if len(s.decode_anchors) >= 2:
            (n0, tok0), (n1, tok1) = s.decode_anchors[0], s.decode_anchors[1]
            roof0, roof1 = self.roofline_step_s(np.array([n0, n1], dtype=float))
            # step(n) = roof(n)/e0 + overhead*n, solved through both anchors
            e0 = min(1.0, roof0 * tok0) if n0 == 0 else s.efficiency_at_empty  # never above the roofline
            overhead = (1.0 / tok1 - roof1 / e0) / n1 if n1 else 0.0
        return min(1.0, max(0.05, e0)), max(0.0, overhead)

    def step_s(self, depths: np.ndarray, noise: float = 1.0, mem_clock: float = 1.0) -> np.ndarray:
        """Seconds per decode step at each depth ((roofline / efficiency + attention overhead × depth) × noise),
        never below the roofline; ``mem_clock``: the memory clock's share of its maximum (the bus reads that much
        slower)."""
        depths = np.asarray(depths, dtype=float)
        if len(depths) == 0:
            return depths
        lo, hi = float(depths.min()), float(depths.max())
        # the roofline is piecewise linear in depth (SWA caps): sample it and interpolate
        grid = np.unique(np.linspace(lo, hi, 9 if hi > lo else 1).round())
        roof = np.interp(depths, grid, self.roofline_step_s(grid)) / mem_clock
        return np.maximum((roof / self._e0 + self._overhead * depths) * noise, roof)

    def decode_tok_s(self, depth: int) -> float:
        """Simulated decode speed at ``depth`` (no noise)."""
        return float(1.0 / self.step_s(np.array([depth]))[0])

    def efficiency(self, depth: int) -> float:
        """Measured / ceiling at ``depth``: the explicit efficiency curve."""
        roof = float(self.roofline_step_s(np.array([depth]))[0])
        return roof / float(self.step_s(np.array([depth]))[0])

    def prefill_s(self, start_depth: int, n_tokens: int) -> float:
        """Seconds to process ``n_tokens`` prompt tokens starting at ``start_depth`` (falls with depth).

        With layers on the CPU, every ubatch also streams those layers' weights to the GPU over PCIe.
        """
        s = self.scenario
        a = 1.0 / s.prefill_tok_s_empty
        k = s.prefill_slowdown_s_per_token
        t = a * n_tokens + k * (n_tokens * start_depth + n_tokens * n_tokens / 2.0)
        if self.placement.weight_bytes_host:
            t += self.placement.weight_bytes_host / self.pcie_bandwidth_bytes_per_s * math.ceil(n_tokens / 512)
        return t

    # -- PCIe -------------------------------------------------------------------------------------------
    def pcie_decode_bytes_per_token(self) -> tuple[float, float]:
        """(host→GPU, GPU→host) bytes per decoded token: hidden state at each CPU/GPU boundary, logits back."""
        boundary = self.shape.n_embd * 4.0
        crossings = 2.0 if self.placement.cpu_layers else 0.0
        vocab = float(self.shape.vocab_size or 32000)
        return (64.0 + boundary * crossings, vocab * 4.0 + boundary * crossings)

    def pcie_prefill_rx_bytes_per_s(self) -> float:
        """Host→GPU bytes per second while prefilling: streamed CPU-layer weights (op offload)."""
        return self.pcie_bandwidth_bytes_per_s * 0.8 if self.placement.weight_bytes_host else 0.0

    # -- memory -----------------------------------------------------------------------------------------
    def server_vram_bytes(self, gpu_index: int) -> int:
        """What the server process holds on one GPU: context, weights, KV and compute buffer."""
        s = self.scenario
        return (s.cuda_context_bytes + self.placement.weight_bytes_gpu[gpu_index]
                + self.placement.kv_bytes_gpu[gpu_index] + s.compute_buffer_bytes)

    def size_bytes(self) -> int:
        """Ollama's ``size``: weights + KV + compute buffers, wherever they live."""
        return self.weight_bytes + self.kv_allocated_bytes + self.scenario.compute_buffer_bytes * self.scenario.n_gpus

    def size_vram_bytes(self) -> int:
        """Ollama's ``size_vram``: the part of ``size`` on GPUs."""
        gpu = sum(self.placement.weight_bytes_gpu) + sum(self.placement.kv_bytes_gpu)
        return gpu + self.scenario.compute_buffer_bytes * sum(1 for n in self.placement.gpu_layers if n)
