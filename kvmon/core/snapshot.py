"""The Snapshot: everything the dashboard, the recorder, the exporter and ``once --json`` show for one poll.

Made by ``kvmon.core.analysis`` from readings plus physics; rendered, recorded and exported as is.
Unknown values are ``None``; ``reasons[field]`` says why, ``provenance[field]`` says where a number
came from (measured / computed / log / user / table / command_line / default / estimated).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from kvmon.core.curve_config import AtlasView
from kvmon.core.readings import PromptChangeReading, Provenance, RateSource
from kvmon.core.serving import ServingView
from kvmon.physics.shape import ModelShape

# A field with this metadata is live-only: the recorder leaves it out (it would repeat in every line).
TRANSIENT: Mapping[str, bool] = {"transient": True}


# the context depths a forecast is given at (unless the user sets others) and the speed chart marks: one list
MILESTONES = (8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576)


class AlertLevel(str, enum.Enum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return {"info": 0, "warning": 1, "critical": 2}[self.value]


class VerdictLevel(str, enum.Enum):
    """How the session stands, as the headline colours it: nothing wrong, something to know, a warning, trouble."""

    OK = "ok"
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return {"ok": 0, "info": 1, "warning": 2, "critical": 3}[self.value]

    @classmethod
    def of(cls, level: AlertLevel) -> VerdictLevel:
        """The verdict level of an alert level (info, warning, critical: the same words)."""
        return cls(level.value)


class Activity(str, enum.Enum):
    """What the model server is doing in a poll that read it: the headline's state, decided once (in the analysis)."""

    DECODING = "decoding"  # a decode rate was measured
    IDLE = "idle"  # nothing is generating (the counters did not move, or kvmon waits so the server can sleep)
    # a request runs and no decode speed was measured since the last poll: its prompt is being processed, or its
    # decoding has only begun (a speed needs two readings of it)
    PROCESSING = "processing"
    LOADING = "loading"  # the model (re)loads: no speed of this load yet
    UNKNOWN = "unknown"  # no live rate, for a reason that is not idleness (no counters, a withheld rate)


class ConnectionStatus(str, enum.Enum):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    LOADING = "loading"
    SLEEPING = "sleeping"
    AUTH_REJECTED = "auth_rejected"
    UNREACHABLE = "unreachable"
    TIMEOUT = "timeout"
    BAD_RESPONSE = "bad_response"
    BAD_URL = "bad_url"
    PAUSED = "paused"
    REPLAY = "replay"


# The states in which the poll read the server, so its numbers (model, speeds, context) are in the Snapshot:
# a sleeping server still answers (with no slots); a replayed snapshot was read when it was recorded.
SERVER_READ_STATUSES = frozenset({ConnectionStatus.CONNECTED, ConnectionStatus.SLEEPING, ConnectionStatus.REPLAY})


@dataclass(frozen=True)
class Connection:
    status: ConnectionStatus
    reason: str | None = None  # one human line; never credentials
    since_t_monotonic: float | None = None
    retry_in_s: float | None = None


@dataclass(frozen=True)
class Alert:
    level: AlertLevel
    code: str  # stable id, e.g. "ctx_full_soon", "vram_spill_soon", "kv_in_host"
    message: str  # specific and computed: numbers and what to do
    value: float | None = None
    headline: str = ""  # the news in one sentence (the verdict's when this is the worst alert); "" for advice


@dataclass(frozen=True)
class Verdict:
    """The headline's news, decided once per poll (``kvmon.core.analysis.verdict``): the worst active condition, or
    what the server is doing when nothing is wrong, in the user's words."""

    level: VerdictLevel = VerdictLevel.OK
    state: str = ""  # a short word or two for people: "Decoding", "Idle", "Spilled", "VRAM full", "Unreachable"
    sentence: str = ""  # one sentence of news: "Spilled: 9.50 GiB of the KV cache in host RAM — capped at ~11 tok/s"
    # what it rests on: an alert's code ("kv_in_host", "vram_full"), "connection" (the server was not read), or when
    # nothing is wrong the activity ("decoding", "idle", "processing", "loading", "sleeping", "unknown")
    cause: str = ""


@dataclass(frozen=True)
class LastDecode:
    """A decode speed measured at one poll: when, and at what depth. While nothing decodes the headline shows the last
    one, dimmed, with its age."""

    tok_s: float
    t_monotonic: float
    t_wall: float
    context_tokens: int | None = None


@dataclass(frozen=True)
class ModelView:
    name: str | None = None  # for people: never a path (see ModelInfo)
    server_name: str | None = None  # the server's own name for it (may be the -m path)
    arch: str | None = None
    n_params: int | None = None
    quantization: str | None = None
    weight_bytes: int | None = None
    weight_bytes_read_per_token: float | None = None  # MoE: active part only (estimate)
    n_layers: int | None = None
    n_ctx: int | None = None  # per slot (what one conversation can hold)
    n_ctx_total: int | None = None  # all cells allocated
    n_ctx_train: int | None = None
    n_slots: int | None = None
    kv_unified: bool | None = None
    kv_type_k: str | None = None
    kv_type_v: str | None = None
    flash_attn: str | None = None
    kv_bytes_per_token: float | None = None  # per position of context, all layers, K+V
    kv_allocated_bytes: int | None = None  # what llama.cpp reserved at load (capacity)
    recurrent_state_bytes: int | None = None
    fit: bool | None = None  # --fit: context and offload not given were sized at load to fit device memory
    fit_target_bytes: tuple[int, ...] | None = None  # what --fit leaves free per device (one value: every device)
    shape_note: str | None = None  # e.g. "unknown architecture 'foo': generic keys used"
    # speculative decoding's draft context, beside the model's: a draft model (-md) with its weights, or the model's
    # own multi-token-prediction layers (draft-mtp, weights already the model's); its KV cache has the same cells
    draft_name: str | None = None  # the draft model's file name, or "MTP layers"
    draft_weight_bytes: int | None = None  # the draft model's weights in memory (None: no draft model, or unknown)
    draft_kv_type_k: str | None = None
    draft_kv_type_v: str | None = None
    draft_kv_bytes_per_token: float | None = None  # the draft context's KV per position of context
    draft_kv_allocated_bytes: int | None = None  # what llama.cpp reserved at load for the draft context's KV
    # the live model's shape, for the what-if calculator; not recorded, not compared
    shape: ModelShape | None = field(default=None, compare=False, repr=False, metadata=TRANSIENT)


@dataclass(frozen=True)
class SlotView:
    id: int
    n_ctx: int | None
    context_tokens: int | None
    processing: bool
    decode_tok_s: float | None = None


@dataclass(frozen=True)
class GpuView:
    index: int
    name: str | None = None
    vram_total_bytes: int | None = None
    vram_used_bytes: int | None = None
    vram_free_bytes: int | None = None
    # VRAM split (stacked bar): weights / KV allocated (of which in use) / compute+other of server / others / free
    weights_bytes: int | None = None
    kv_allocated_bytes: int | None = None
    kv_in_use_bytes: int | None = None
    server_other_bytes: int | None = None
    other_processes_bytes: int | None = None
    draft_bytes: int | None = None  # speculative decoding's draft model here: its weights and its KV cache
    server_used_bytes: int | None = None  # all the model server's processes hold on this GPU
    peak_bandwidth_bytes_per_s: float | None = None
    bandwidth_source: str | None = None
    achieved_bandwidth_bytes_per_s: float | None = None  # decode's reads here per second, over the whole step
    # its share of each token's step (several devices read their layers in turn): it reads at achieved ÷ share then
    step_share: float | None = None
    memory_busy_percent: float | None = None
    gpu_busy_percent: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    pcie_bandwidth_bytes_per_s: float | None = None  # one direction, at the link's maximum
    pcie_generation: int | None = None  # the link now (it trains down at idle), and at most
    pcie_width: int | None = None
    pcie_max_generation: int | None = None
    pcie_max_width: int | None = None
    mem_clock_mhz: float | None = None  # the memory clock now, and its maximum (the peak bandwidth's)
    mem_clock_max_mhz: float | None = None
    core_clock_mhz: float | None = None  # the graphics clock now, and its maximum
    core_clock_max_mhz: float | None = None
    clock_reasons: tuple[str, ...] | None = None  # why the clocks are held down (kvmon.core.readings.ClockReason)
    other_processes_busy_percent: float | None = None  # the GPU's time other processes took lately
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: float | None = None
    reasons: Mapping[str, str] = field(default_factory=dict)
    # what the device is and who read it: a discrete GPU or unified memory, from telemetry or only the server's log
    kind: str = "discrete_gpu"  # "discrete_gpu" | "unified_memory"
    vendor: str | None = None  # "nvidia" | "amd" | "intel" | "apple"
    source: str | None = None  # "nvml" | "amdgpu" | "xe" | "i915" | "apple" | "log" (named only in the log)
    log_name: str | None = None  # the server's name for it: "CUDA0", "ROCm1", "Vulkan0", "MTL0"
    memory_source: str | None = None  # where the VRAM figures come from: "measured" | "log" | "table"
    working_set_limit_bytes: int | None = None  # unified memory: the GPU's cliff (Metal's working set)
    working_set_source: str | None = None  # "metal" | "sysctl" | "log" | "estimated"
    spill_total_bytes: int | None = None  # AMD GTT: system RAM the GPU maps; Apple: compressed memory (used only)
    spill_used_bytes: int | None = None
    server_spill_bytes: int | None = None
    vendor_index: int | None = None  # its place among its vendor's devices (ROCm1 is AMD's second)
    pci_bus_id: str | None = None  # "0000:0c:00.0"
    memory_type: str | None = None  # "GDDR6", "LPDDR5X"


@dataclass(frozen=True)
class HostView:
    """Host RAM as a device: its size and use, its bandwidth and where that came from, what of the model is there."""

    ram_total_bytes: int | None = None
    ram_available_bytes: int | None = None
    weights_in_host_bytes: int | None = None  # partial offload, or all of a CPU-only server's
    kv_in_host_bytes: int | None = None
    draft_in_host_bytes: int | None = None  # speculative decoding's draft model here: its weights and its KV cache
    host_bandwidth_bytes_per_s: float | None = None
    server_rss_bytes: int | None = None
    host_bandwidth_source: str | None = None  # "user" | "measured" | "table" | None
    host_bandwidth_measured_at_unix_s: float | None = None
    host_bandwidth_note: str | None = None
    swap_total_bytes: int | None = None
    swap_used_bytes: int | None = None
    memory_type: str | None = None  # "DDR5-6000"
    cpu_name: str | None = None
    achieved_bandwidth_bytes_per_s: float | None = None  # what decode reads from host RAM per second
    step_share: float | None = None  # its share of each token's step beside other devices (as GpuView.step_share)
    in_ceiling: bool = False  # decode reads bytes from host RAM (CPU layers or KV): host RAM is a ceiling device
    unified_with: int | None = None  # the unified-memory device whose RAM this is (Apple Silicon), if any
    prompt_cache_limit_bytes: int | None = None  # --cache-ram: host RAM the prompt cache may take; -1 no limit, 0 off
    cpu_count: int | None = None  # logical CPUs
    cpu_busy_cores: float | None = None  # every process together since the last poll, in cores
    server_cpu_cores: float | None = None  # the model server's processes alone
    reasons: Mapping[str, str] = field(default_factory=dict)


# Why decode runs below the ceiling, each named once (kvmon.core.analysis.causes); "unexplained" is what remains
CauseCode = Literal["memory_clock", "core_clock", "pcie_link", "other_processes", "cpu_contended",
                    "slower_than_before", "drafting", "client_slower", "unexplained"]


@dataclass(frozen=True)
class SlowdownCause:
    """One reason decode runs below the ceiling at this depth, with its evidence (``kvmon.core.analysis.causes``)."""

    code: CauseCode
    share: float | None  # its estimated share of the gap between the measured speed and the ceiling (0–1); None:
    # not estimated (the evidence says why), or not part of that gap (the client's view)
    summary: str  # the few words the headline adds: "memory clock at 60% of its maximum (power cap)"
    message: str  # the line with its numbers and what to do


PromptChangeKind = Literal["timestamp", "date", "time", "id", "number", "text", "removed", "role"]
PromptCacheSource = Literal["the server's counters", "each reply's timings"]


@dataclass(frozen=True)
class PromptMiss:
    """A reply whose long prompt the server read again whole, though most of it had been read before."""

    t_monotonic: float
    t_wall: float
    reread_tokens: int
    reused_tokens: int
    reread_s: float | None


@dataclass(frozen=True)
class PromptChange(PromptChangeReading):
    """A change the proxy tallied (``PromptChangeReading``) of a kind kvmon names: what the Snapshot shows."""

    change: PromptChangeKind


@dataclass(frozen=True)
class PromptCacheView:
    """The prompt cache over the session (``kvmon.core.analysis.prompt_cache``): prompt tokens read again against
    those reused, the seconds the reading cost, the misses, what made prompts change, and the next turn's wait."""

    source: PromptCacheSource | None = None
    reads: int = 0  # prompts (or polls' worth of prompts, from counters) counted
    reread_tokens: int = 0
    reused_tokens: int = 0
    reread_s: float | None = None
    last_reread_tokens: int | None = None
    last_reused_tokens: int | None = None
    last_reread_s: float | None = None
    misses: int = 0
    miss: PromptMiss | None = None  # the latest miss, while it is news
    changes: tuple[PromptChange, ...] = ()  # kvmon proxy's tally, newest first
    repeated: int | None = None  # the last prompt was the one before it again, this many times in a row
    next_ttft_s: float | None = None  # the next turn's predicted time to first token at this depth
    next_prompt_tokens: int | None = None  # the prompt tokens it will read (the cache reusing the rest)


@dataclass(frozen=True)
class Milestone:
    context_tokens: int
    tok_s: float
    low_tok_s: float | None = None
    high_tok_s: float | None = None
    ceiling_tok_s: float | None = None


@dataclass(frozen=True)
class Regime:
    """A stretch of the session in which what decode speed depends on stayed the same (model, n_ctx, cache types,
    slots, devices, placement, the server process): the forecast fits only the current one's points."""

    index: int = 0  # 1, 2, ... in this session; 0 before the first
    cause: str | None = None  # why it began: "start" | "model" | "n_ctx" | "cache_types" | "slots" | "devices" |
    # "placement" | "reload"
    description: str | None = None  # the same for people, e.g. "reloaded: n_ctx 32,768 → 131,072"
    since_t_monotonic: float | None = None
    since_t_wall: float | None = None
    since_context_tokens: int | None = None  # the depth of its first poll (where the plot marks it)


@dataclass(frozen=True)
class Forecast:
    tokens_until_ctx_full: int | None = None
    seconds_until_ctx_full: float | None = None
    tokens_until_vram_full: int | None = None  # only when something else is eating VRAM
    seconds_until_vram_full: float | None = None
    fit_a_s: float | None = None  # time per token at empty context
    fit_b_s_per_token: float | None = None  # extra time per token of context (beyond every sliding window)
    fit_points: int = 0  # measured points of the current regime
    milestones: tuple[Milestone, ...] = ()
    regime: Regime = field(default_factory=Regime)
    # "ceiling_scaled" | "bandwidth" | "bandwidth+attention" (kvmon.physics.decode_model) | "context_linear"
    fit_form: str | None = None
    fit_efficiency: float | None = None  # the fraction of peak bandwidth the fit says the bytes are read at
    fit_overhead_s: float | None = None  # fixed seconds per token beyond the bytes
    fit_attention_factor: float | None = None  # extra seconds per second of KV read, growing with depth
    # why there is no fit, why it is the context-linear fallback, or what limits it (kernels that change with depth)
    fit_reason: str | None = None
    # (context tokens, tok/s, low, high) at the ceiling curve's depths: what the hero plot draws
    curve: tuple[tuple[int, float, float, float], ...] = ()
    # the forecast stops here (short of n_ctx): past it the attention kernels change and the slope does not carry
    valid_to_tokens: int | None = None


@dataclass(frozen=True)
class SpeculativeView:
    """Speculative decoding as the server counts it since it started: drafts, drafted and accepted tokens, and the
    tokens each target step yields (the factor on the one-token ceiling)."""

    drafts: int
    draft_tokens: int
    accepted_tokens: int
    generated_tokens: int
    tokens_per_step: float | None = None
    acceptance_rate: float | None = None  # accepted ÷ drafted
    one_token_ceiling_tok_s: float | None = None  # the ceiling without speculation, at this depth
    one_token_curve: tuple[tuple[int, float], ...] = ()  # (context tokens, tok/s) without speculation: its floor
    draft_weight_bytes: int | None = None  # the drafter's weights, read once per drafted token: a draft model's or
    # the model's MTP layers (None: no drafter, as with n-gram lookup, or its size unknown: an upper bound then)
    drafted_per_step: float | None = None  # drafted tokens per target step
    draft_bytes_per_token: float | None = None  # what one drafted token reads at this depth: weights and draft KV
    # drafted tokens accepted at each position of the draft (0: the first drafted token), since the server started,
    # and that count as a share of the drafts (the acceptance rate at each position); empty when the server does not
    # count by position, or its counts do not add up to the accepted tokens (reasons["speculative.by_position"])
    accepted_by_position: tuple[int, ...] = ()
    acceptance_by_position: tuple[float, ...] = ()


@dataclass(frozen=True)
class EnergyView:
    """What the model's devices draw and used while kvmon watched (``kvmon.core.analysis.energy``)."""

    power_w: float | None = None  # the counted devices together, now
    energy_j: float | None = None  # since kvmon began counting (the intervals every device could be read)
    seconds: float = 0.0  # the time that energy covers
    joules_per_token: float | None = None  # energy while decoding ÷ tokens decoded, the same intervals
    tokens_per_wh: float | None = None
    devices: tuple[str, ...] = ()  # what is counted: GPU names, "CPU package"
    whole_cpu_package: bool = False  # the CPU package's counter includes every other process on the CPU
    # the last reply: its own time (prefill + generation, the server's) × its devices' mean power over the busy
    # intervals it spanned (an estimate), that over its generated tokens, and that power
    last_reply_energy_j: float | None = None
    last_reply_joules_per_token: float | None = None
    last_reply_power_w: float | None = None


@dataclass(frozen=True)
class LatencyView:
    """The session's replies as the server timed them (``kvmon.core.analysis.latency``): time to first token and
    inter-token latency, the last reply's and percentiles over the session, with cumulative histogram counts."""

    replies: int = 0
    source: str | None = None  # "request timings" | "server counters" | "vLLM histograms (means per poll)"
    ttft_last_s: float | None = None
    ttft_p50_s: float | None = None
    ttft_p95_s: float | None = None
    itl_last_s: float | None = None  # mean seconds per token of the last reply
    itl_p50_s: float | None = None
    itl_p95_s: float | None = None
    itl_mean_s: float | None = None
    last_prompt_tokens: int | None = None  # the last reply's prompt tokens computed (not cached)
    last_prefill_tok_s: float | None = None
    last_generate_s: float | None = None  # the last reply's seconds of generation
    # the times to first token are lower bounds (and the prefill rate an upper one): llama-server's prompt counter,
    # which they come from, leaves out a draft context's own prompt processing (reasons["latency.ttft"])
    ttft_lower_bound: bool = False
    # some of the session's replies ended between two polls while another request ran: what the counters added up
    # there may be several replies, so ``replies`` is a lower bound (reasons["latency.replies"])
    replies_at_least: bool = False
    ttft_buckets: tuple[int, ...] = ()  # cumulative counts at kvmon.core.analysis.latency.TTFT_BUCKETS_S, then +Inf
    ttft_sum_s: float = 0.0
    ttft_count: int = 0
    itl_buckets: tuple[int, ...] = ()  # the same at ITL_BUCKETS_S
    itl_sum_s: float = 0.0
    itl_count: int = 0


@dataclass(frozen=True)
class CeilingSuspect:
    """Measured speed above the ceiling: one of the ceiling's inputs is wrong. Which one is most likely, and why."""

    input: str  # "bandwidth" | "placement" | "weights_read_per_token" | "kv_in_use"
    message: str


@dataclass(frozen=True)
class Snapshot:
    """One poll, analysed. Plain values only, so it records to JSON and replays exactly."""

    seq: int
    t_monotonic: float
    t_wall: float
    connection: Connection
    backend: str | None = None
    server_version: str | None = None
    url: str | None = None
    model: ModelView = field(default_factory=ModelView)
    slots: tuple[SlotView, ...] = ()
    context_tokens: int | None = None  # the deepest active conversation
    decode_tok_s: float | None = None  # None while idle: no data, not 0
    activity: Activity | None = None  # None: the server was not read in this poll
    prefill_tok_s: float | None = None
    decode_rate_source: RateSource | None = None
    ceiling_tok_s: float | None = None  # what the memory bus allows at context_tokens
    ceiling_curve: tuple[tuple[int, float], ...] = ()  # (context tokens, tok/s) up to n_ctx
    efficiency: float | None = None  # decode ÷ ceiling; None (with ceiling_suspect) when decode exceeds the ceiling
    ceiling_suspect: CeilingSuspect | None = None  # set when the measured speed is above the ceiling
    kv_in_use_bytes: int | None = None
    kv_allocated_bytes: int | None = None
    bytes_read_per_token: float | None = None
    achieved_bandwidth_bytes_per_s: float | None = None
    peak_bandwidth_bytes_per_s: float | None = None
    bandwidth_headroom_fraction: float | None = None
    gpus: tuple[GpuView, ...] = ()
    gpus_unavailable_reason: str | None = None
    host: HostView = field(default_factory=HostView)
    forecast: Forecast = field(default_factory=Forecast)
    alerts: tuple[Alert, ...] = ()
    provenance: Mapping[str, Provenance] = field(default_factory=dict)
    reasons: Mapping[str, str] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    serving: ServingView | None = None  # a router or llama-swap: its models, the followed one, this poll's events
    speculative: SpeculativeView | None = None  # the server drafts tokens (speculative decoding): its counts
    energy: EnergyView | None = None  # power and energy of the model's devices; None: not read (reasons["energy"])
    latency: LatencyView | None = None  # replies' time to first token and inter-token latency; None: none seen yet
    # the last decode speed measured (this poll's while it decodes), and the last one before the current regime began
    # (a reload, another context size: "70 tok/s before the reload"); None: none measured (of this model)
    last_decode: LastDecode | None = None
    decode_before: LastDecode | None = None
    # why decode runs below the ceiling, largest share first (empty: nothing found, or nothing decodes)
    slowdown_causes: tuple[SlowdownCause, ...] = ()
    prompt_cache: PromptCacheView | None = None  # prompts read again and reused; None: nothing counted yet
    verdict: Verdict | None = None  # the headline's news (None only for a Snapshot made outside the analysis)
    # what the atlas remembers of this configuration (earlier points, this session's sweeps); None: no atlas kept
    atlas: AtlasView | None = field(default=None, compare=False, metadata=TRANSIENT)

    @property
    def server_read(self) -> bool:
        """Whether this poll read the server (see ``SERVER_READ_STATUSES``): the one test every consumer uses."""
        return self.connection.status in SERVER_READ_STATUSES
