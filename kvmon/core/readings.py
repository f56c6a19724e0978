"""Immutable readings that sources return and analysis consumes.

Sources (HTTP, NVML, psutil, log files) turn the outside world into these plain values; nothing here
does I/O. Unknown is ``None``; a field that could not be read says why in ``reasons``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from kvmon.core.sanitize import plain_text


class FailureKind(str, enum.Enum):
    """Why a poll produced no reading (or only part of one)."""

    BAD_URL = "bad_url"
    UNREACHABLE = "unreachable"
    TIMEOUT = "timeout"
    AUTH_REJECTED = "auth_rejected"
    MODEL_LOADING = "model_loading"
    ENDPOINT_DISABLED = "endpoint_disabled"
    UNEXPECTED_BODY = "unexpected_body"
    NOT_FOUND = "not_found"
    SERVER_ERROR = "server_error"


class DeviceKind(str, enum.Enum):
    """What a memory device is: its own VRAM behind a bus, or memory shared with the CPU."""

    DISCRETE_GPU = "discrete_gpu"
    UNIFIED_MEMORY = "unified_memory"  # Apple Silicon, AMD APUs: the GPU computes from system RAM


class Provenance(str, enum.Enum):
    """Where a number came from; every figure on screen can say it."""

    MEASURED = "measured"
    COMPUTED = "computed"
    USER = "user"
    TABLE = "table"
    LOG = "log"
    COMMAND_LINE = "command_line"
    DEFAULT = "default"
    ESTIMATED = "estimated"

    def __str__(self) -> str:
        """The value, as JSON and the screen write it (a mixed-in enum's own str names the class)."""
        return self.value


# where a decode rate comes from: the server's slots (its own, an Ollama child's, the proxy's), /metrics' counters, or
# the replies that ended between two polls (their own timing)
RateSource = Literal["slots", "child_slots", "proxy", "metrics", "replies"]

# speculative decoding's drafters, as every source says them (ServerConfig.drafter)
DRAFT_MODEL = "draft_model"  # a draft model of its own (llama-server -md)
MTP_LAYERS = "mtp_layers"  # the model's own multi-token-prediction layers (llama-server --spec-type draft-mtp)
NGRAM = "ngram"  # n-gram lookup in the context: no weights read

# speculative decoding: drafted tokens accepted at each position of the draft (llama-server's and vLLM's counter,
# labelled ``position``, 0 the first drafted token); a reading's ``metrics`` holds one key per position
ACCEPTED_PER_POSITION = "spec_decode_num_accepted_tokens_per_pos_total"
MAX_DRAFT_POSITIONS = 64  # no speculative decoder drafts more tokens per step than this


def position_counter(name: str, position: int) -> str:
    """The ``metrics`` key of counter ``name`` at one draft position: ``name{position="N"}``."""
    return f'{name}{{position="{position}"}}'


def position_counts(metrics: Mapping[str, float], name: str) -> tuple[float, ...]:
    """Counter ``name`` at positions 0, 1, … as long as they run without a gap (empty when the server has none)."""
    out: list[float] = []
    while len(out) < MAX_DRAFT_POSITIONS and (v := metrics.get(position_counter(name, len(out)))) is not None:
        out.append(v)
    return tuple(out)


@dataclass(frozen=True)
class SourceFailure:
    """A typed failure with a one-line human reason (never contains credentials). The reason may quote a server's
    own error text: it is kept as plain text (``kvmon.core.sanitize``), whoever shows it."""

    kind: FailureKind
    reason: str
    endpoint: str | None = None
    status_code: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", plain_text(self.reason))

    def __str__(self) -> str:
        return self.reason


class SourceError(Exception):
    """Raised by a source when a poll cannot produce any reading."""

    def __init__(self, failure: SourceFailure) -> None:
        super().__init__(failure.reason)
        self.failure = failure


@dataclass(frozen=True)
class SlotReading:
    """One llama-server slot (or one Ollama request stream) at poll time."""

    id: int
    n_ctx: int | None
    context_tokens: int | None  # tokens now held in this slot's cache (prompt + generated)
    processing: bool
    n_decoded: int | None = None  # generated tokens of the current/last request (a counter)
    n_remain: int | None = None
    id_task: int | None = None
    n_prompt_tokens_processed: int | None = None
    n_prompt_tokens_cache: int | None = None
    context_estimated: bool = False  # context_tokens is a lower bound kvmon put together (a proxied stream), not read
    speculative: bool | None = None  # llama-server: the slot drafts tokens (speculative decoding)


@dataclass(frozen=True)
class LogDevice:
    """A compute device as the server's log names it (device list at start, ``using device …``, Metal's init).

    ``name`` is llama.cpp's: ``CUDA0``, ``ROCm1``, ``Vulkan0``, ``MTL0`` (older builds ``Metal``), ``SYCL0``,
    ``RPC[host:port]``. Sizes are what the log printed at load (free memory then, not now).
    """

    name: str
    description: str | None = None  # "NVIDIA GeForce RTX 3090", "AMD Radeon RX 7900 XTX", "Apple M1 Max"
    pci_bus_id: str | None = None  # "0000:01:00.0" (CUDA/HIP builds since 2025-09)
    total_bytes: int | None = None
    free_bytes: int | None = None
    unified_memory: bool | None = None  # Vulkan "uma: 1", Metal "has unified memory = true"
    working_set_limit_bytes: int | None = None  # Metal's recommendedMaxWorkingSetSize


@dataclass(frozen=True)
class ServerConfig:
    """Settings no endpoint shows: learnt from the command line, environment, log or user."""

    n_ctx_total: int | None = None  # -c: all slots together
    n_parallel: int | None = None  # -np
    kv_unified: bool | None = None
    type_k: str | None = None
    type_v: str | None = None
    flash_attn: str | None = None  # "on" | "off" | "auto"
    n_gpu_layers: int | None = None
    n_ubatch: int | None = None  # the effective physical batch: min(-ub, n_batch)
    n_batch: int | None = None  # -b, capped at the context by llama.cpp
    swa_full: bool | None = None  # --swa-full: sliding-window layers keep the whole context
    model_path: str | None = None
    draft_model_path: str | None = None  # -md: the draft model of speculative decoding
    spec_types: tuple[str, ...] | None = None  # --spec-type: "draft-simple", "draft-mtp", "ngram-simple", ...
    drafter: str | None = None  # what drafts tokens: DRAFT_MODEL, MTP_LAYERS or NGRAM (None: none, or not known)
    draft_type_k: str | None = None  # -ctkd / -ctvd: the draft context's KV cache types (default f16)
    draft_type_v: str | None = None
    draft_kv_bytes_allocated: int | None = None  # the log's KV size line of the draft context (a draft model's, MTP's)
    draft_model_buffer_bytes_by_device: Mapping[str, int] = field(default_factory=dict)  # the draft model's weights
    draft_kv_buffer_bytes_by_device: Mapping[str, int] = field(default_factory=dict)  # the draft context's KV
    offloaded_layers: int | None = None
    total_layers: int | None = None
    kv_bytes_allocated: int | None = None  # llama.cpp's own KV size line
    model_buffer_bytes_by_device: Mapping[str, int] = field(default_factory=dict)
    kv_buffer_bytes_by_device: Mapping[str, int] = field(default_factory=dict)
    compute_buffer_bytes_by_device: Mapping[str, int] = field(default_factory=dict)
    provenance: Mapping[str, Provenance] = field(default_factory=dict)
    device_free_bytes_by_device: Mapping[str, int] = field(default_factory=dict)  # log: "using device … MiB free"
    n_ctx_per_slot: int | None = None  # one conversation's context (Ollama /api/ps context_length)
    sleep_idle_seconds: int | None = None  # --sleep-idle-seconds: unloads the model when idle; -1 never; None unknown
    recurrent_bytes_allocated: int | None = None  # llama.cpp's own recurrent-state size line
    devices: tuple[LogDevice, ...] = ()  # the compute devices the log names, in the server's order
    fit: bool | None = None  # --fit: unset context and offload sized at load to fit device memory (default on)
    fit_target_bytes: tuple[int, ...] | None = None  # --fit-target: memory --fit leaves free, per device (one: all)
    prompt_cache_limit_bytes: int | None = None  # --cache-ram: host RAM the prompt cache may take; -1 no limit, 0 off
    n_threads: int | None = None  # -t: the CPU threads that compute layers on the CPU
    kv_offload: bool | None = None  # KV cache on the GPU (True) or kept in host RAM (False: LM Studio's setting)


@dataclass(frozen=True)
class ModelInfo:
    """What is known about the loaded model; ``shape`` is a ``kvmon.physics.shape.ModelShape``.

    ``name`` is for people (an alias, the GGUF's ``general.name`` or the file name, never a path); ``server_name``
    is what the server itself calls the model (llama-server: the alias, which is the ``-m`` path unless
    ``--alias`` was given; Ollama: its tag).
    """

    name: str | None = None
    server_name: str | None = None
    arch: str | None = None
    n_params: int | None = None
    weight_bytes: int | None = None
    n_ctx_train: int | None = None
    n_embd: int | None = None
    quantization: str | None = None
    path: str | None = None
    digest: str | None = None
    shape: Any = None  # ModelShape | None (kept Any to avoid an import cycle)
    shape_source: str | None = None  # "gguf" | "ollama_show" | "v1_models" | "user"
    weight_bytes_source: Provenance | None = None  # how weight_bytes is known (None: measured, the server's word)
    draft_weight_bytes: int | None = None  # speculative decoding's draft model: its weights (its GGUF's tensors)
    draft_shape: Any = None  # the draft model's ModelShape (its KV cache), None when its file was not read
    draft_name: str | None = None  # the draft model's file name (never a path)
    mtp_weight_bytes: int | None = None  # the model's own multi-token-prediction layers (nextn), read per drafted token


@dataclass(frozen=True)
class RequestStats:
    """Timings of one finished request, as the server reported them (proxy or final chunk)."""

    t_end: float
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    prompt_seconds: float | None = None
    predicted_tokens: int | None = None
    predicted_seconds: float | None = None
    context_tokens: int | None = None
    client_tok_s: float | None = None  # the reply's tokens as they reached the client (kvmon proxy's chunk times)
    reread_tokens: int | None = None  # prompt tokens the server read (computed) for it, the cached ones left out
    prompt_change: str | None = None  # where its prompt first differed from the one before it (kvmon proxy)
    prompt_repeated: int | None = None  # the same prompt sent this many times in a row before it (kvmon proxy)
    request_id: int | None = None  # kvmon proxy's number for it (the same reply read again is the same one)


@dataclass(frozen=True)
class PromptChangeReading:
    """One kind of change that made a conversation's prompt differ from the one before it, as ``kvmon proxy``
    tallies it (``kvmon.proxy.prompts``): where, what, how often, since when and the prompt reading it cost."""

    sentence: str  # "system message changed at character 212 — looks like a timestamp"
    fix: str
    message_index: int
    role: str
    offset: int | None
    change: str
    count: int
    first_unix: float
    last_unix: float
    reread_tokens: int = 0
    reread_seconds: float = 0.0


@dataclass(frozen=True)
class ServerReading:
    """One poll of a model server. Counters are raw; rates are made in ``kvmon.core.rates``."""

    t_monotonic: float
    t_wall: float
    backend: str  # "llama-server" | "ollama" | "vllm" | "lmstudio" | "openai" | "unknown"
    url: str  # never carries credentials
    server_version: str | None = None
    state: str = "ok"  # "ok" | "loading" | "sleeping" | "idle"
    model: ModelInfo | None = None
    slots: tuple[SlotReading, ...] = ()
    total_slots: int | None = None
    kv_unified: bool | None = None
    metrics_enabled: bool | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)  # counters by name, no prefix
    config: ServerConfig = field(default_factory=ServerConfig)
    weight_bytes_vram: int | None = None  # Ollama size_vram
    weight_bytes_host: int | None = None  # size - size_vram (partial offload)
    live_rate_source: RateSource | None = None  # the live counters the server offers (not "replies")
    live_rate_unavailable_reason: str | None = None
    live_rate_idle: bool = False  # that reason is idleness (kvmon lets the server sleep), not a missing counter
    last_request: RequestStats | None = None
    server_pids: tuple[int, ...] = ()
    reasons: Mapping[str, str] = field(default_factory=dict)  # field -> why unknown/partial
    # a server with one pooled KV cache and no per-conversation slots (vLLM): the fraction of the pool's
    # config.n_ctx_total tokens that running requests hold, and how many requests run and wait
    kv_in_use_fraction: float | None = None
    requests_running: int | None = None
    requests_waiting: int | None = None
    prompt_changes: tuple[PromptChangeReading, ...] = ()  # kvmon proxy's tally of what made prompts change


@dataclass(frozen=True)
class PcieLink:
    generation: int | None = None
    width: int | None = None
    max_generation: int | None = None
    max_width: int | None = None
    bandwidth_bytes_per_s: float | None = None  # one direction, at max link


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_bytes: int | None
    kind: str  # "compute" | "graphics"
    is_server: bool = False
    busy_percent: float | None = None  # its share of the GPU's time lately (NVML process utilisation), if known


# Why a device runs its clocks below their maximum, as every device source says it (NVML's clocks event reasons,
# amdgpu's power and temperature against their limits, xe's throttle reasons): GpuReading.clock_reasons
ClockReason = Literal["idle", "power_cap", "thermal", "hw_slowdown", "power_brake", "applications_clocks",
                      "sync_boost", "display", "current_limit"]
CLOCK_REASONS: tuple[ClockReason, ...] = get_args(ClockReason)


@dataclass(frozen=True)
class GpuReading:
    """One memory device at poll time, from any device source; every field may be None with a reason in ``reasons``.

    The one reading every device source returns (NVML, amdgpu and Intel sysfs, Apple's sysctl and Metal): ``kind``
    says what it is, ``vram_*`` is the memory the device computes from (for unified memory: the RAM it shares),
    ``peak_bandwidth_bytes_per_s`` with ``bandwidth_source`` (``nvml``/``driver``: the driver's clock × bus width,
    ``table``, ``user``, ``measured``). ``index`` is the device's place among all devices of the poll;
    ``vendor_index`` its place among its vendor's (CUDA1 is NVIDIA's second, ROCm0 AMD's first).
    """

    index: int
    name: str | None = None
    uuid: str | None = None
    vram_total_bytes: int | None = None
    vram_used_bytes: int | None = None
    vram_free_bytes: int | None = None
    vram_reserved_bytes: int | None = None
    gpu_busy_percent: float | None = None
    memory_busy_percent: float | None = None  # duty cycle, not bandwidth
    mem_clock_mhz: float | None = None
    mem_clock_max_mhz: float | None = None
    core_clock_mhz: float | None = None  # the graphics (SM) clock now, and its maximum
    core_clock_max_mhz: float | None = None
    clock_reasons: tuple[ClockReason, ...] | None = None  # why clocks are held down now (): none; None: not known
    bus_width_bits: int | None = None
    peak_bandwidth_bytes_per_s: float | None = None
    bandwidth_source: str | None = None  # "nvml" | "table" | "user"
    dram_bandwidth_util_percent: float | None = None  # GPM, where supported
    pcie: PcieLink = field(default_factory=PcieLink)
    pcie_tx_bytes_per_s: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    energy_j: float | None = None  # the device's energy counter (joules since some origin: driver load, boot)
    temperature_c: float | None = None
    processes: tuple[GpuProcess, ...] | None = None
    server_used_bytes: int | None = None
    other_processes_used_bytes: int | None = None
    other_processes_busy_percent: float | None = None  # the GPU's time other processes took lately (NVML)
    kind: str = DeviceKind.DISCRETE_GPU.value
    vendor: str | None = None  # "nvidia" | "amd" | "intel" | "apple"
    source: str | None = None  # the device source: "nvml" | "amdgpu" | "xe" | "i915" | "apple"
    vendor_index: int | None = None
    pci_bus_id: str | None = None  # "0000:0c:00.0"
    pci_device_id: str | None = None  # "1002:73bf"
    memory_type: str | None = None  # "GDDR6", "LPDDR5X"
    spill_total_bytes: int | None = None  # AMD GTT: system RAM the GPU maps (where allocations go when VRAM is full)
    spill_used_bytes: int | None = None
    server_spill_bytes: int | None = None  # the server's own share of that
    working_set_limit_bytes: int | None = None  # unified memory: what the GPU may wire (Metal's working set)
    working_set_source: str | None = None  # "metal" | "sysctl" | "estimated"
    reasons: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HostReading:
    t_monotonic: float
    ram_total_bytes: int | None = None
    ram_available_bytes: int | None = None
    swap_total_bytes: int | None = None
    swap_used_bytes: int | None = None
    server_rss_bytes: int | None = None
    host_bandwidth_bytes_per_s: float | None = None
    host_bandwidth_source: str | None = None  # "user" | "measured" | "table"
    host_bandwidth_measured_at_unix_s: float | None = None  # when the probe ran (source "measured")
    host_bandwidth_note: str | None = None  # how a table figure was made ("DDR5-5600 × 2 channels …")
    memory_type: str | None = None  # "DDR5-5600" as the system reports it
    cpu_name: str | None = None
    cpu_energy_j: float | None = None  # the CPU package's energy counter (RAPL), joules since some origin
    cpu_energy_range_j: float | None = None  # where that counter wraps to 0
    cpu_count: int | None = None  # logical CPUs
    cpu_busy_cores: float | None = None  # every process together, since the last poll, in cores (1.0: one core busy)
    server_cpu_cores: float | None = None  # the model server's processes alone, the same way
    reasons: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuSetReading:
    """All devices of the device sources at one instant; ``unavailable_reason`` set when there is none (why)."""

    t_monotonic: float
    gpus: tuple[GpuReading, ...] = ()
    driver_version: str | None = None
    unavailable_reason: str | None = None
