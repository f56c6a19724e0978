"""What the alert rules read and the limits they hold it to: the one set of thresholds and one poll's facts.

The analysis gathers the facts (``kvmon.core.analysis.alert_facts``); the rules (``kvmon.core.alert_rules``) and the
engine (``kvmon.core.alerts``) read them. Unknowns are None and simply do not alert.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvmon.core.snapshot import AlertLevel
from kvmon.core.units import GIB, MIB

CONNECTION = "connection"
MODEL_FAILED = "model_failed"
RECORDING_FAILED = "recording_failed"
# tips and notes: said in the alerts panel, never the headline's news
ADVICE = frozenset({"kv_cache_advice", "prompt_cache_ram", "metrics_disabled", "prefill_bound", "log_verbosity"})

@dataclass(frozen=True)
class AlertThresholds:
    """Every alert threshold kvmon uses, in one place; settings may override any field."""

    min_hold_s: float = 15.0  # a raised alert stays at least this long (and a level change restarts it)
    # Context full (per conversation): warn when few tokens or little time is left.
    ctx_warn_tokens: int = 4096
    ctx_warn_seconds: float = 120.0
    ctx_warn_min_used_fraction: float = 0.5  # a small n_ctx does not warn right at the start
    ctx_critical_tokens: int = 512
    ctx_clear_margin_tokens: int = 1024
    # VRAM running out: from the trend of free VRAM over the last minute.
    vram_trend_window_s: float = 60.0
    vram_trend_min_span_s: float = 3.0
    vram_trend_min_drop_bytes: int = 256 * MIB  # smaller drifts over the window are noise, not a trend
    vram_trend_steady_s: float = 20.0  # free VRAM fell in each quarter of this long: a load's step or a blip is not
    vram_warn_seconds: float = 180.0
    vram_critical_seconds: float = 60.0
    vram_clear_seconds: float = 360.0
    # VRAM full: free VRAM on a GPU under this is a standing warning (anything more spills) until it is over the
    # second, while nothing of the model is in host RAM yet (then the spill is the news)
    vram_full_free_bytes: int = 512 * MIB
    vram_full_clear_bytes: int = 1 * GIB
    # KV cache or weights outside VRAM.
    host_fraction_raise: float = 0.01
    # Cache-type advice: worth saying when a cheaper type frees at least this much.
    advice_min_freed_bytes: int = 1 * GIB
    advice_clear_freed_bytes: int = 512 * MIB
    # Connection: a failure must last this long before it is an alert (one slow poll is not).
    connection_raise_s: float = 3.0
    # Unified memory (Apple Silicon): the model plus its caches against the GPU's working-set limit.
    unified_warn_fraction: float = 0.90
    unified_clear_fraction: float = 0.85
    # Host swap growing over the trend window while the model lives in host or unified memory.
    swap_warn_growth_bytes: int = 256 * MIB
    # Host prompt cache (--cache-ram): said when its limit is above the RAM available, until it fits in this share.
    prompt_cache_clear_fraction: float = 0.8
    prompt_cache_min_suggest_bytes: int = 256 * MIB
    # Prefill-bound: the last reply waited at least this long for its first token, and longer than it generated.
    prefill_bound_min_s: float = 5.0


@dataclass(frozen=True)
class GpuVramFacts:
    """One GPU's free VRAM and its trend over the window."""

    index: int
    name: str | None
    vram_free_bytes: int | None
    vram_total_bytes: int | None
    seconds_until_full: float | None  # None when free VRAM is not falling
    free_drop_bytes: int | None = None  # how much free VRAM fell over the window
    other_processes_growth_bytes: int | None = None  # growth of other processes over the window
    window_s: float | None = None
    other_processes_bytes: int | None = None  # what other programs hold on it now
    unified: bool = False  # unified memory (Apple Silicon): its cliff is the working-set limit, not free VRAM


@dataclass(frozen=True)
class UnifiedFacts:
    """One unified-memory device: what the model needs of it against the GPU's working-set limit."""

    name: str
    need_bytes: int  # weights + KV and recurrent caches + compute buffers on the device
    limit_bytes: int
    limit_source: str  # "metal" | "sysctl" | "log" | "estimated"


@dataclass(frozen=True)
class CacheAdvice:
    """A cheaper KV cache type: the flags to use and what it would change here."""

    type_k: str
    type_v: str
    flags: str  # e.g. "-ctk q8_0 -ctv q8_0" or "OLLAMA_KV_CACHE_TYPE=q8_0"
    freed_bytes: int
    tok_s: float | None  # predicted decode speed at the current depth with that type
    tok_s_now: float | None = None  # today's on the same footing: measured, or while idle the forecast
    assumed_type: str | None = None  # the cache type today, when kvmon could not see it and took the default
    assumed_why: str | None = None  # why it could not see it


@dataclass(frozen=True)
class AlertFacts:
    """What the alert rules need from one poll; unknowns are None and simply do not alert."""

    t_monotonic: float
    backend: str | None = None
    connected: bool = True
    connection_failure: str | None = None  # FailureKind value when not connected
    connection_reason: str | None = None
    n_ctx: int | None = None
    context_tokens: int | None = None
    slot_id: int | None = None
    tokens_until_ctx_full: int | None = None
    seconds_until_ctx_full: float | None = None
    decode_tok_s: float | None = None
    gpus: tuple[GpuVramFacts, ...] = ()
    kv_host_fraction: float | None = None  # part of the KV cache in host RAM
    kv_host_bytes: int | None = None
    kv_host_via: str | None = None  # "PCIe" | "host RAM"
    kv_host_cap_tok_s: float | None = None
    weights_host_bytes: int | None = None
    weight_bytes: int | None = None
    weights_host_cap_tok_s: float | None = None
    kv_with_host_layers: bool = False  # the KV cache of the CPU layers lives in host RAM with them
    kv_type: str | None = None  # the K cache type today (None: unknown)
    kv_type_assumed: bool = False  # kv_type is the default, taken because the server does not say
    smaller_kv_type: str | None = None  # the smaller cache type the user lets kvmon suggest (settings), this server

    metrics_enabled: bool | None = None
    advice: tuple[CacheAdvice, ...] = ()
    cpu_only: bool = False  # every weight and the KV cache in host RAM: the CPU decodes
    cpu_only_idle_gpu: str | None = None  # a GPU the server could use but does not (named in its log or read)
    cpu_only_cap_tok_s: float | None = None
    host_bandwidth_bytes_per_s: float | None = None
    host_bandwidth_source: str | None = None
    unified: tuple[UnifiedFacts, ...] = ()
    swap_growth_bytes: int | None = None  # host swap growth over the trend window (model in host/unified memory)
    swap_used_bytes: int | None = None
    log_hint: str | None = None  # why the server's log cannot say where the model lives
    prompt_cache_limit_bytes: int | None = None  # --cache-ram: -1 no limit, 0 off
    ram_available_bytes: int | None = None
    last_ttft_s: float | None = None  # the last reply's time to first token (its prefill, as the server timed it)
    last_generate_s: float | None = None  # and its seconds of generation
    last_prompt_tokens: int | None = None
    last_prefill_tok_s: float | None = None
    # the last decode speed before the current regime began, and what began it ("the reload"): the spill's "before"
    decode_before_tok_s: float | None = None
    decode_before_what: str | None = None
    # alerts whose ground the analysis found wrong this poll (a guess a measured speed refutes): gone at once, no hold
    withdrawn: frozenset[str] = frozenset()


# (level or None, the message with what to do, its value, the headline: the news in one sentence, for the verdict;
# "" for advice, which is never the headline)
RuleResult = tuple[AlertLevel | None, str, float | None, str]
Rule = Callable[[AlertFacts, AlertThresholds, AlertLevel | None], RuleResult]
NOTHING: RuleResult = (None, "", None, "")
