"""The simulator's scenarios: hardware, model, cache settings, a scripted chat and the story's events.

A scenario says *what* is simulated; ``kvmon.sim.model`` turns it into timing with ``kvmon.physics``
and ``kvmon.sim.engine`` plays it. Decode step time at context depth n is

    step_s(n) = roofline_s(n) / efficiency_at_empty + attention_overhead_s_per_token × n

where ``roofline_s(n) = 1 / ceiling_tok_s`` (weights plus KV in use, over each device's bandwidth).
The second term is the explicit efficiency curve: attention compute that grows with depth and that the
pure memory roofline does not see. For ``seed-3090x2`` it is calibrated on the seed's table (58.45 tok/s
empty → 22.68 tok/s at 262K): the measured step time grows linearly, 17.1 ms + 0.103 µs × n (within
2% at every listed depth); the q8_0 KV read explains 0.037 µs of that slope at 936 GB/s, the remaining
0.066 µs per token of depth is attention work. A scenario may give the two numbers directly or as
measured ``decode_anchors`` (depth, tok/s) from which ``kvmon.sim.model`` solves them (seed: efficiency
0.98 at empty context, 65 ns per token of depth; the solved curve then meets the seed's 8K, 32K, 64K and
131K figures within 2%). Prefill time per prompt token is ``1/prefill_tok_s_empty +
prefill_slowdown_s_per_token × depth`` (seed: 1550 → 513 tok/s over 262K). A few things are simplified
and said so: noise is one seeded factor per turn; parallel slots do not slow each other; weights and KV
split over devices in proportion to their layers. ``cpu-ddr5`` and ``apple-m2max`` are the two machines with no
discrete GPU: a desktop decoding from dual-channel DDR5, and an Apple M2 Max whose unified memory holds a 70B model
close to Metal's working-set limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from kvmon.core.units import GIB


class KeyMoment(NamedTuple):
    """A point of a scenario where its headline says something worth seeing: ``--help`` lists it, so that a user can
    join the scenario there (``--start-at``)."""

    name: str
    at_s: float  # simulated seconds


@dataclass(frozen=True)
class ChatScript:
    """A conversation that grows turn by turn: each turn adds a user message, then a generated answer."""

    n_turns: int
    first_prompt_tokens: int  # system prompt + first message
    target_context_tokens: int  # context reached after the last turn (prompt tokens per turn follow)
    generated_tokens: int  # answer length per turn
    think_s: float  # pause between an answer and the next user message (simulated seconds)
    start_delay_s: float = 1.0
    loop: bool = True  # start a new conversation after the last turn (the demo never stops)

    def user_tokens(self, turn: int) -> int:
        """New prompt tokens sent at ``turn`` (0-based): the first prompt, then equal steps to the target."""
        if turn == 0:
            return self.first_prompt_tokens
        rest = self.target_context_tokens - self.first_prompt_tokens - self.n_turns * self.generated_tokens
        return max(16, rest // max(1, self.n_turns - 1))


@dataclass(frozen=True)
class Reload:
    """The server reloads the model at ``at_s`` with a new context size; layers that do not fit go to CPU."""

    at_s: float
    n_ctx: int
    load_s: float = 8.0


@dataclass(frozen=True)
class Throttle:
    """From ``at_s`` to ``until_s`` the GPUs hold their memory clock at ``mem_clock_fraction`` of its maximum while
    busy, for ``reasons`` (NVML's clocks event reasons, as kvmon names them). A turn that starts then decodes at that
    clock throughout (the simulator times a request whole when it starts)."""

    at_s: float
    until_s: float
    mem_clock_fraction: float
    reasons: tuple[str, ...] = ("power_cap",)


@dataclass(frozen=True)
class Scenario:
    """Everything one simulated run needs; times are simulated seconds since the server started."""

    name: str
    description: str
    preset_keys: tuple[str, ...]  # first key found in kvmon.physics.presets.PRESETS is used
    model_alias: str  # what the server calls the model (file name, or Ollama "name:tag")
    gpu_name: str  # looked up in kvmon.physics.gpus (bandwidth, VRAM); unused for a CPU-only machine
    n_ctx: int  # -c: all slots together
    backend: str = "llama-server"  # "llama-server" | "ollama" | "vllm" | "lmstudio"
    n_gpus: int = 1  # 0: a CPU-only machine
    n_parallel: int = 1
    type_k: str = "f16"
    type_v: str = "f16"
    flash_attn: str = "on"
    n_gpu_layers: int | None = None  # None: as many as fit (llama.cpp --fit)
    efficiency_at_empty: float = 0.85
    attention_overhead_s_per_token: float = 0.0
    # measured (depth, tok/s) points; when given, the two fields above are solved from the first two
    decode_anchors: tuple[tuple[int, float], ...] = ()
    prefill_tok_s_empty: float = 1500.0
    prefill_slowdown_s_per_token: float = 0.0
    host_bandwidth_bytes_per_s: float = 64e9  # dual-channel DDR5: where CPU layers are read
    pcie_gen: int = 4
    pcie_width: int = 16
    cuda_context_bytes: int = 300 * 1024**2  # per GPU, the driver's share of the server process
    compute_buffer_bytes: int = 512 * 1024**2  # per GPU (llama_context compute buffer)
    other_vram: tuple[tuple[float, int], ...] = ()  # (t_s, bytes) points on GPU 0, linear in between
    reload: Reload | None = None
    script: ChatScript = field(default_factory=lambda: ChatScript(20, 600, 16000, 300, 5.0))
    noise_sd: float = 0.02  # per-turn multiplicative noise on decode speed (seeded)
    seed: int = 3
    initial_load_s: float = 0.0
    ollama_version: str = "0.33.0"
    vllm_metric_names: str = "v1"  # "v0": the names older vLLM wrote (gpu_cache_usage_perc, no engine label)
    lmstudio_version: str = "0.4.1"  # before "0.4": REST v0 only (/api/v1/ answers 404)
    device: str = "cuda"  # "cuda" (NVIDIA GPUs, read through the fake NVML) | "metal" (Apple unified memory) | "cpu"
    host_ram_bytes: int = 64 * 1024**3  # the simulated machine's RAM
    cpu_name: str = "AMD Ryzen 9 7950X 16-Core Processor"
    memory_type: str = "DDR5-6000"
    working_set_fraction: float = 0.75  # Metal's working-set limit as a share of RAM (what Metal reports, simulated)
    weights_type: str | None = None  # the served file's type ("BF16" for a checkpoint as published); None: the preset's
    max_model_len: int | None = None  # vLLM's --max-model-len (one request's limit); None: the pool split by slots
    embeddings_in_host: bool = True  # llama.cpp keeps the token embeddings in host RAM; vLLM holds all on the GPU
    throttles: tuple[Throttle, ...] = ()  # stretches where the memory clock is held down while busy
    agent: bool = False  # the chat comes from a coding agent through kvmon proxy, the time in its system prompt
    key_moments: tuple[KeyMoment, ...] = ()

    def other_vram_bytes(self, t: float) -> int:
        """VRAM another application holds on GPU 0 at ``t`` (the points of ``other_vram``, linear in between)."""
        pts = self.other_vram
        return int(np.interp(t, [p[0] for p in pts], [float(p[1]) for p in pts])) if pts else 0

    def throttle_at(self, t: float) -> Throttle | None:
        """The throttle in force at ``t`` (simulated seconds), if any."""
        return next((th for th in self.throttles if th.at_s <= t < th.until_s), None)


# Llama-3.1-8B Q4_K_M on an RTX 4090, as measured: three scenarios tell their stories on it
_LLAMA_8B_4090 = Scenario(
    name="", description="", preset_keys=("llama-3.1-8b", "llama3.1-8b", "llama-3-8b"),
    model_alias="Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", gpu_name="RTX 4090", n_ctx=32768,
    decode_anchors=((0, 140.0), (32768, 70.0)), prefill_tok_s_empty=9000.0, prefill_slowdown_s_per_token=2.0e-9)

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="seed-3090x2",
            description="the seed's story: a 27B hybrid (Qwen3.5-style, 3 recurrent : 1 attention) Q4_K_M on two "
            "RTX 3090s, layer split, q8_0 KV with flash attention; 50 turns to 256K context",
            preset_keys=("qwen3.5-27b", "qwen35-27b", "qwen3.6-27b", "qwen3-next-27b"),
            model_alias="Qwen3.5-27B-Q4_K_M.gguf",
            gpu_name="RTX 3090",
            n_gpus=2,
            n_ctx=262144,
            type_k="q8_0",
            type_v="q8_0",
            flash_attn="on",
            decode_anchors=((0, 58.45), (262144, 22.68)),  # the seed's table (see the module docstring)
            prefill_tok_s_empty=1550.0,
            prefill_slowdown_s_per_token=4.97e-9,
            script=ChatScript(n_turns=50, first_prompt_tokens=1200, target_context_tokens=262000,
                              generated_tokens=600, think_s=20.0),
            key_moments=(KeyMoment("deep in the chat", 1500.0),),
        ),
        replace(
            _LLAMA_8B_4090,
            name="spill-4090",
            description="Llama-3.1-8B Q4_K_M on an RTX 4090 (24 GiB): another application's VRAM use rises until "
            "free VRAM runs out, then the model reloads with a 128K context that no longer fits: partial "
            "offload, layers on the CPU, PCIe traffic, the cliff",
            other_vram=((0.0, 1 * GIB), (120.0, 1 * GIB), (300.0, int(14.75 * GIB))),
            reload=Reload(at_s=330.0, n_ctx=131072, load_s=8.0),
            # the chat fills the 32K context just as VRAM runs out (both warnings show first); it waits for the
            # reload with 128K and goes on there, on a model that no longer fits
            script=ChatScript(n_turns=60, first_prompt_tokens=800, target_context_tokens=60000,
                              generated_tokens=350, think_s=5.0),
            key_moments=(KeyMoment("decoding in VRAM", 100.0), KeyMoment("VRAM running out", 260.0),
                         KeyMoment("VRAM and context full", 310.0), KeyMoment("spilled after the reload", 360.0)),
        ),
        Scenario(
            name="ollama-partial",
            description="Ollama 0.33 with gemma3:27b Q4_K_M and a 32K context on a 16 GiB RTX 4060 Ti: "
            "the model does not fit, so /api/ps shows size_vram < size (part of it runs on the CPU)",
            backend="ollama",
            preset_keys=("gemma-3-27b", "gemma3-27b"),
            model_alias="gemma3:27b",
            gpu_name="RTX 4060 Ti",
            n_ctx=32768,
            decode_anchors=((0, 9.0), (32768, 7.0)),
            prefill_tok_s_empty=600.0,
            prefill_slowdown_s_per_token=4.0e-9,
            script=ChatScript(n_turns=30, first_prompt_tokens=500, target_context_tokens=30000,
                              generated_tokens=300, think_s=8.0),
            key_moments=(KeyMoment("partly on the CPU", 20.0),),
        ),
        Scenario(
            name="vllm",
            description="vLLM 0.33 serving Qwen3-8B as published (bf16 safetensors, 16.4 GB of weights) with "
            "--max-model-len 32768 on an RTX 4090: the memory left after the weights holds one KV pool of 40,960 "
            "tokens in 16-token blocks; a chat grows to 30K tokens",
            backend="vllm",
            preset_keys=("qwen3-8b",),
            model_alias="Qwen/Qwen3-8B",
            gpu_name="RTX 4090",
            # vLLM's pool: 0.92 × 24 GiB less the weights (16.38 GB) and ~1.3 GB of activations and CUDA graphs
            # leaves ~6 GB, 40,960 tokens at 144 KiB each (36 layers × 8 KV heads × 128 × K+V × 2 bytes)
            n_ctx=40960,
            max_model_len=32768,
            weights_type="BF16",
            embeddings_in_host=False,
            compute_buffer_bytes=int(0.9 * GIB),  # activations and CUDA graphs: the rest of 0.92 × 24 GiB
            # llama.cpp on an RTX 4090 decodes Llama-3-8B F16 (16.06 GB) at 54.84 tok/s (tg 512) and 50.88 (tg 8192,
            # the mean depth ~4K) (XiongjieDai/GPU-Benchmarks-on-LLM-Inference); Qwen3-8B's 16.38 GB and 36 layers'
            # KV give 54 tok/s empty and 49.5 at 4K
            decode_anchors=((0, 54.0), (4096, 49.5)),
            prefill_tok_s_empty=12000.0,
            prefill_slowdown_s_per_token=1.0e-9,
            script=ChatScript(n_turns=40, first_prompt_tokens=900, target_context_tokens=30000,
                              generated_tokens=400, think_s=4.0),
            key_moments=(KeyMoment("decoding in VRAM", 20.0),),
        ),
        Scenario(
            name="lmstudio",
            description="LM Studio 0.4 with gemma-3-12b Q4_K_M (llama.cpp engine), 16K context, flash attention, "
            "KV cache on the GPU, on a 16 GiB RTX 4060 Ti; speeds seen through `kvmon proxy`",
            backend="lmstudio",
            preset_keys=("gemma-3-12b",),
            model_alias="google/gemma-3-12b",
            gpu_name="RTX 4060 Ti",
            n_ctx=16384,
            decode_anchors=((0, 33.0), (16384, 27.0)),
            prefill_tok_s_empty=700.0,
            prefill_slowdown_s_per_token=3.0e-9,
            script=ChatScript(n_turns=20, first_prompt_tokens=600, target_context_tokens=15000,
                              generated_tokens=300, think_s=6.0),
            key_moments=(KeyMoment("decoding through the proxy", 130.0),),
        ),
        replace(
            _LLAMA_8B_4090,
            name="power-cap-4090",
            description="Llama-3.1-8B Q4_K_M on an RTX 4090 set to a quiet power profile: from two minutes in, "
            "while it decodes, the power cap holds its memory clock at 60% of its maximum, and decode falls below "
            "the ceiling for that reason (NVML's clocks and their reasons say so); at six minutes the cap is lifted",
            throttles=(Throttle(at_s=120.0, until_s=360.0, mem_clock_fraction=0.6),),
            script=ChatScript(n_turns=60, first_prompt_tokens=800, target_context_tokens=30000,
                              generated_tokens=350, think_s=5.0),
            key_moments=(KeyMoment("decoding at the full memory clock", 60.0),
                         KeyMoment("the power cap holds the memory clock down", 200.0),
                         KeyMoment("the cap lifted: full speed again", 380.0)),
        ),
        replace(
            _LLAMA_8B_4090,
            name="agent-cache-miss",
            description="a coding agent on Llama-3.1-8B Q4_K_M (RTX 4090, 64K context) through kvmon proxy: its "
            "system prompt starts with the date and time, so every request changes the prompt's first message and "
            "llama-server reads the whole conversation again; kvmon names the change, counts what it costs and "
            "predicts the next reply's wait",
            n_ctx=65536,
            agent=True,
            # a task with the files it reads (6K tokens), then a tool result of ~1.5K tokens each step
            script=ChatScript(n_turns=24, first_prompt_tokens=6000, target_context_tokens=45000,
                              generated_tokens=600, think_s=2.0),
            key_moments=(KeyMoment("its prompt read again whole: the clock in its system prompt", 60.0),),
        ),
        replace(
            _LLAMA_8B_4090,  # the same file, on no GPU
            name="cpu-ddr5",
            description="Llama-3.1-8B Q4_K_M on a CPU-only desktop (Ryzen 9 7950X, dual-channel DDR5-6000, 64 GiB): "
            "weights and KV cache in host RAM, decode bound by the memory bus (about 62 GB/s measured)",
            gpu_name="",
            n_gpus=0,
            device="cpu",
            decode_anchors=((0, 11.5), (32768, 6.2)),
            prefill_tok_s_empty=120.0,
            prefill_slowdown_s_per_token=2.0e-7,
            host_bandwidth_bytes_per_s=62e9,
            script=ChatScript(n_turns=30, first_prompt_tokens=400, target_context_tokens=30000,
                              generated_tokens=250, think_s=6.0),
            key_moments=(KeyMoment("decoding on the CPU", 110.0),),
        ),
        Scenario(
            name="apple-m2max",
            description="Llama-3.1-70B Q4_K_M on an Apple M2 Max (64 GB unified memory, 400 GB/s) with a 24K "
            "context: weights and KV cache share the RAM, close to Metal's 48 GiB working-set limit",
            preset_keys=("llama-3.1-70b", "llama3.1-70b"),
            model_alias="Meta-Llama-3.1-70B-Instruct-Q4_K_M.gguf",
            gpu_name="Apple M2 Max",
            n_ctx=24576,
            device="metal",
            decode_anchors=((0, 7.6), (24576, 6.1)),
            prefill_tok_s_empty=95.0,
            prefill_slowdown_s_per_token=1.0e-7,
            host_bandwidth_bytes_per_s=400e9,
            cuda_context_bytes=0,
            compute_buffer_bytes=320 * 1024**2,
            cpu_name="Apple M2 Max",
            memory_type="LPDDR5",
            script=ChatScript(n_turns=24, first_prompt_tokens=600, target_context_tokens=23000,
                              generated_tokens=250, think_s=8.0),
            key_moments=(KeyMoment("near Metal's limit", 30.0),),
        ),
    )
}


def get_scenario(name: str) -> Scenario:
    """The single-model scenario called ``name``; ValueError otherwise (``kvmon.sim.catalog.check`` says every
    known name, the router and llama-swap ones too)."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None
