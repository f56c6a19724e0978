"""Alerts: the one set of thresholds, the rules that read them, and hysteresis so nothing flaps.

Analysis gathers the facts of one poll into ``AlertFacts``; ``AlertEngine.update`` turns them into
``Alert``s. Every rule raises at one threshold and clears only past a second, safer one, and a raised
alert is held for ``min_hold_s`` before it may clear or step down. Messages are computed from the
numbers of this poll (how many tokens, how long, how many GiB) and say what to do. Longer than most modules
because the thresholds and every rule that reads them belong together: one place to see what kvmon warns about.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kvmon.core.backend import backend_of
from kvmon.core.snapshot import Alert, AlertLevel
from kvmon.core.units import GIB, MIB, fmt_bytes, fmt_count, fmt_duration, fmt_tok_s_approx
from kvmon.physics.cache_types import DEFAULT_CACHE_TYPE


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


RuleResult = tuple[AlertLevel | None, str, float | None]
Rule = Callable[[AlertFacts, AlertThresholds, AlertLevel | None], RuleResult]


def _approx_tokens(n: float) -> str:
    """2,287 → "2,300"; 430 → "430": forecasts are not exact."""
    if n >= 1000:
        return fmt_count(round(n, -2))
    if n >= 100:
        return fmt_count(round(n, -1))
    return fmt_count(n)


# How a user gives a conversation more context, in the words of each backend (llama-server's -c otherwise)
def rule_ctx_full(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """Context nearly full: warn by tokens left or by time left at the current rate."""
    left, n_ctx, ctx = f.tokens_until_ctx_full, f.n_ctx, f.context_tokens
    if left is None or not n_ctx or ctx is None:
        return None, "", None
    used = ctx / n_ctx
    secs = f.seconds_until_ctx_full
    level: AlertLevel | None = None
    if left <= th.ctx_critical_tokens:
        level = AlertLevel.CRITICAL
    elif used >= th.ctx_warn_min_used_fraction and (
        left <= th.ctx_warn_tokens or (secs is not None and secs <= th.ctx_warn_seconds)
    ):
        level = AlertLevel.WARNING
    elif current is not None and used >= th.ctx_warn_min_used_fraction and (
        left <= th.ctx_warn_tokens + th.ctx_clear_margin_tokens
        or secs is None  # a pause between answers (no rate, no time left to say): the context did not empty
        or secs <= 2 * th.ctx_warn_seconds
    ):
        level = AlertLevel.WARNING  # inside the hysteresis band: stay
    if current == AlertLevel.CRITICAL and left <= th.ctx_critical_tokens + th.ctx_clear_margin_tokens // 4:
        level = AlertLevel.CRITICAL
    where = f" in slot {f.slot_id}" if f.slot_id is not None else ""
    knob = backend_of(f.backend).context_setting
    if left <= 0:
        msg = (f"Context full{where} ({fmt_count(n_ctx)} tokens): the server will truncate or stop; "
               f"start a new chat or restart with a larger {knob}")
    else:
        when = ""
        if secs is not None and f.decode_tok_s:
            when = f" ({fmt_duration(secs)} at {f.decode_tok_s:.0f} tok/s)"
        msg = (f"Context full{where} in ~{_approx_tokens(left)} tokens{when}: "
               f"{fmt_count(ctx)} of {fmt_count(n_ctx)} used; start a new chat or raise {knob}")
    return level, msg, float(left)


def rule_vram_full(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """Free VRAM falling: warn when, at the trend of the last minute, it runs out soon."""
    worst: GpuVramFacts | None = None
    for g in f.gpus:
        if g.seconds_until_full is None:
            continue
        if worst is None or worst.seconds_until_full is None or g.seconds_until_full < worst.seconds_until_full:
            worst = g
    if worst is None or worst.seconds_until_full is None:
        return None, "", None
    secs = worst.seconds_until_full
    level: AlertLevel | None = None
    if secs <= th.vram_critical_seconds:
        level = AlertLevel.CRITICAL
    elif secs <= th.vram_warn_seconds:
        level = AlertLevel.WARNING
    elif current is not None and secs <= th.vram_clear_seconds:
        level = AlertLevel.WARNING
    gpu = f"GPU {worst.index}" + (f" ({worst.name})" if worst.name else "")
    window = fmt_duration(worst.window_s, approx=False) if worst.window_s else "the last minute"
    window = "the last minute" if worst.window_s and worst.window_s >= 50 else f"the last {window}"
    if worst.other_processes_growth_bytes is not None and worst.other_processes_growth_bytes >= 64 * MIB:
        cause = f"another program took {fmt_bytes(worst.other_processes_growth_bytes)} in {window}"
    elif worst.free_drop_bytes:  # a fall of 0 from first to last sample says nothing: use the trend wording
        cause = f"free VRAM fell {fmt_bytes(worst.free_drop_bytes)} in {window}"
    else:
        cause = "free VRAM is falling"
    msg = (f"VRAM full in {fmt_duration(secs)} on {gpu}: {cause}; {fmt_bytes(worst.vram_free_bytes)} left. "
           "Then the KV cache or weights spill to host RAM and decode slows sharply")
    return level, msg, secs


def rule_kv_in_host(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """Part of the KV cache lives in host RAM (no room in VRAM, or -nkvo): the spill cliff."""
    frac = f.kv_host_fraction
    if frac is None:
        return None, "", None
    level = AlertLevel.CRITICAL if frac >= th.host_fraction_raise or (current is not None and frac > 0) else None
    via = f.kv_host_via or "host RAM"
    amount = f"{fmt_bytes(f.kv_host_bytes)}, " if f.kv_host_bytes else ""
    head = f"KV cache in host RAM ({amount}{frac:.0%})"
    if f.kv_host_cap_tok_s:
        head += f": decode capped at ~{f.kv_host_cap_tok_s:.0f} tok/s by {via}"
    msg = f"{head}; {_kv_in_host_fix(f)}"
    return level, msg, frac


def _kv_in_host_fix(f: AlertFacts) -> str:
    """What to do about KV in host RAM: free VRAM, a smaller context, and a smaller cache type only from what the
    cache is (or, when kvmon could not see it, said as a condition) and only one the user lets kvmon suggest."""
    b = backend_of(f.backend)
    if b.kv_in_host_fix:
        return b.kv_in_host_fix
    base = f"free VRAM, lower {b.context_setting}"
    current = f.kv_type or DEFAULT_CACHE_TYPE
    smaller = f.smaller_kv_type
    flags = b.cache_type_flags(smaller) if smaller and b.offers_cache_type(smaller) else None
    if flags is None:
        return base
    if f.kv_type is None or f.kv_type_assumed:
        return f"{base}, or, if your cache is {current}, use `{flags}`"
    return f"{base} or use a smaller cache type (`{flags}`)"


def rule_weights_in_host(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """Partial offload: some weights in host RAM (Ollama size_vram < size, or -ngl below the layer count)."""
    host, total = f.weights_host_bytes, f.weight_bytes
    if host is None or not total:
        return None, "", None
    frac = host / total
    level = AlertLevel.WARNING if frac >= th.host_fraction_raise or (current is not None and host > 0) else None
    cap = f"; decode capped at ~{f.weights_host_cap_tok_s:.0f} tok/s" if f.weights_host_cap_tok_s else ""
    b = backend_of(f.backend)
    smaller = f"a smaller context ({b.context_setting}) or quantization would fit it"
    hint = f"raise {b.offload_setting} if VRAM allows, or {smaller}" if b.offload_setting else smaller
    kv = " with their KV cache" if f.kv_with_host_layers else ""
    msg = (f"Model partly in host RAM: {fmt_bytes(host)} of {fmt_bytes(total)} ({frac:.0%}) on the CPU{kv}{cap}; "
           f"{hint}")
    return level, msg, frac


def rule_cpu_only(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """The model runs on the CPU: worth a line always, a warning when a GPU sits idle beside it."""
    if not f.cpu_only:
        return None, "", None
    bw = f.host_bandwidth_bytes_per_s
    read = f"read at {bw / 1e9:.0f} GB/s ({f.host_bandwidth_source or 'unknown source'})" if bw else \
        "read at a host bandwidth kvmon does not know yet (settings, --bandwidth host=GB/s)"
    c = f.cpu_only_cap_tok_s  # two figures: the line stands while the context grows (the chart has the exact one)
    cap = f": the ceiling is {fmt_tok_s_approx(c)} at this depth" if c else ""
    if f.cpu_only_idle_gpu:
        offload = backend_of(f.backend).offload_setting
        fix = f"raise {offload} or use a smaller model" if offload else "use a smaller model"
        return (AlertLevel.WARNING, f"Model runs on the CPU although {f.cpu_only_idle_gpu} is there: weights and "
                f"KV cache in host RAM, {read}{cap}; {fix}", None)
    return AlertLevel.INFO, f"Decoding on the CPU: weights and KV cache in host RAM, {read}{cap}", None


def rule_prefill_bound(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """The last reply spent longer on its prompt than on its answer: the wait is prefill (compute), not the bus."""
    ttft, gen = f.last_ttft_s, f.last_generate_s
    if ttft is None or gen is None or ttft < th.prefill_bound_min_s or ttft < gen:
        return None, "", None
    prompt = (f" ({f.last_prompt_tokens:,} prompt tokens at {f.last_prefill_tok_s:,.0f} tok/s)"
              if f.last_prompt_tokens and f.last_prefill_tok_s else "")
    return (AlertLevel.INFO, f"Prefill-bound: the last reply waited {ttft:.1f} s for its first token{prompt}, longer "
            f"than the {gen:.1f} s it generated for; the prompt, not the memory bus, is the wait (an unchanged "
            "conversation prefix stays cached; a larger batch size or flash attention speeds prefill up)", ttft)


def rule_unified_working_set(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """Unified memory: the cliff is the GPU's working-set limit (then macOS pages and swaps), not PCIe."""
    worst = max(f.unified, key=lambda u: u.need_bytes / u.limit_bytes if u.limit_bytes else 0.0, default=None)
    if worst is None or not worst.limit_bytes:
        return None, "", None
    frac = worst.need_bytes / worst.limit_bytes
    level: AlertLevel | None = None
    if frac > 1.0:
        level = AlertLevel.CRITICAL
    elif frac >= th.unified_warn_fraction or (current is not None and frac >= th.unified_clear_fraction):
        level = AlertLevel.WARNING
    est = " (estimated: install pyobjc-framework-Metal to read it)" if worst.limit_source == "estimated" else ""
    limit = f"{fmt_bytes(worst.limit_bytes)} GPU working-set limit on {worst.name}{est}"
    if frac > 1.0:
        head = f"Model and caches ({fmt_bytes(worst.need_bytes)}) exceed the {limit}: macOS pages GPU memory"
    else:
        head = (f"Model and caches need {fmt_bytes(worst.need_bytes)} of the {limit} "
                f"({fmt_bytes(worst.limit_bytes - worst.need_bytes)} left)")
    b = backend_of(f.backend)
    smaller = f.smaller_kv_type
    flags = b.cache_type_flags(smaller) if smaller and b.offers_cache_type(smaller) else None
    fix = f"lower {b.context_setting}" + (f" or use {flags}" if flags else "")
    return level, f"{head}; past it decode slows sharply — {fix} (or raise iogpu.wired_limit_mb)", frac


def rule_swap_growing(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """Host swap grows while the model lives in host or unified memory: the weights or the cache are paged out."""
    grow = f.swap_growth_bytes
    if grow is None:
        return None, "", None
    limit = th.swap_warn_growth_bytes if current is None else th.swap_warn_growth_bytes // 4
    level = AlertLevel.WARNING if grow >= limit else None
    used = f" ({fmt_bytes(f.swap_used_bytes)} in use)" if f.swap_used_bytes else ""
    return (level, f"Host swapping: swap grew {fmt_bytes(grow)} in the last minute{used} while the model lives in "
            "RAM; close other applications or use a smaller model or context", float(grow))


def rule_log_hint(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """The server's log was given but hides where the model lives (llama-server without -lv 4)."""
    if not f.log_hint:
        return None, "", None
    return AlertLevel.INFO, f"Placement unknown: {f.log_hint}", None


def rule_metrics_disabled(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """llama-server without --metrics: prefill speed and request counters are unavailable."""
    b = backend_of(f.backend)
    if b.metrics_setting is None or f.metrics_enabled is not False:
        return None, "", None
    return (AlertLevel.INFO, f"/metrics is disabled: start {b.label} with {b.metrics_setting} "
            "(prefill speed and request counters need it)", None)


def rule_cache_advice(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """A cheaper KV cache type would free VRAM (and usually be faster at depth): say which flags."""
    if not f.advice:
        return None, "", None
    limit = th.advice_clear_freed_bytes if current is not None else th.advice_min_freed_bytes
    # the first (mildest) cheaper type that frees enough: q8_0 before q4_0
    best = next((a for a in f.advice if a.freed_bytes >= limit), None)
    if best is None:
        return None, "", None
    # a forecast: whole tokens per second (a tenth would be false precision, and would change every poll), beside
    # today's (one whole number alone read as no gain, or as the ceiling's)
    speed, now = "", best.tok_s_now
    if best.tok_s:
        speed = (f"keep ~{best.tok_s:.0f} tok/s here and " if now and round(best.tok_s) == round(now) else
                 f"give ~{best.tok_s:.0f} tok/s here{f' (~{now:.0f} now)' if now else ''} and ")
    claim = f"`{best.flags}` would {speed}free {fmt_bytes(best.freed_bytes)}"
    if best.assumed_type is not None:  # said as a condition: the cache may already be smaller
        why = f" ({best.assumed_why})" if best.assumed_why else ""
        claim = f"If your KV cache is {best.assumed_type}{why}, {claim}"
    return AlertLevel.INFO, claim, float(best.freed_bytes)


def rule_prompt_cache_ram(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """llama-server keeps idle conversations in a host-RAM prompt cache (--cache-ram, 8 GiB by default): say so
    when it may grow past the RAM still available, with a limit that fits."""
    limit, avail = f.prompt_cache_limit_bytes, f.ram_available_bytes
    setting = backend_of(f.backend).prompt_cache_setting
    if limit is None or limit == 0 or avail is None or setting is None:
        return None, "", None
    keep = max(th.prompt_cache_min_suggest_bytes, (avail // 2) // (256 * MIB) * (256 * MIB))
    raise_at = avail if current is None else int(avail * th.prompt_cache_clear_fraction)
    if limit != -1 and limit <= raise_at:
        return None, "", None
    flag = setting.format(mib=keep // MIB)
    size = "has no size limit (--cache-ram -1)" if limit == -1 else f"may grow to {fmt_bytes(limit)} (--cache-ram)"
    return (AlertLevel.INFO, f"The host prompt cache {size} with {fmt_bytes(avail)} of RAM available: `{flag}` "
            "keeps it within (0 turns it off)", float(limit))


_CONNECTION_MESSAGES = {
    "auth_rejected": "API key rejected: set the server's key in Settings (--api-key)",
    "bad_url": "Bad server URL",
}


def _connection_rule(since: dict[str, float]) -> Rule:
    def rule_connection(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
        """The server cannot be read (gone, hung, key rejected) for more than a moment."""
        if f.connected or f.connection_failure in (None, "model_loading"):
            since.pop("t", None)
            return None, "", None
        t0 = since.setdefault("t", f.t_monotonic)
        level = AlertLevel.CRITICAL if f.connection_failure == "auth_rejected" else AlertLevel.WARNING
        if f.t_monotonic - t0 < th.connection_raise_s and level != AlertLevel.CRITICAL and current is None:
            return None, "", None
        base = _CONNECTION_MESSAGES.get(f.connection_failure or "", "Server not answering")
        gone = f"for {fmt_duration(f.t_monotonic - t0, approx=False)}" if f.t_monotonic - t0 >= 1 else ""
        msg = f"{base}{': ' + f.connection_reason if f.connection_reason else ''}"
        return level, (f"{msg} ({gone})" if gone else msg), f.t_monotonic - t0

    return rule_connection


@dataclass
class _State:
    level: AlertLevel
    since: float  # when raised or last changed level
    raised_at: float


@dataclass
class AlertEngine:
    """Stateful evaluation of the rules with hysteresis and a minimum hold time."""

    thresholds: AlertThresholds = field(default_factory=AlertThresholds)
    _state: dict[str, _State] = field(default_factory=dict, init=False, repr=False)
    _conn: dict[str, float] = field(default_factory=dict, init=False, repr=False)
    last_raised: tuple[str, ...] = field(default=(), init=False)  # codes that rose (or escalated) in the last update

    def _rules(self) -> Sequence[tuple[str, Rule]]:
        return (
            ("connection", _connection_rule(self._conn)),
            ("ctx_full_soon", rule_ctx_full),
            ("vram_full_soon", rule_vram_full),
            ("kv_in_host", rule_kv_in_host),
            ("weights_in_host", rule_weights_in_host),
            ("cpu_only", rule_cpu_only),
            ("unified_working_set", rule_unified_working_set),
            ("swap_growing", rule_swap_growing),
            ("log_verbosity", rule_log_hint),
            ("metrics_disabled", rule_metrics_disabled),
            ("kv_cache_advice", rule_cache_advice),
            ("prompt_cache_ram", rule_prompt_cache_ram),
            ("prefill_bound", rule_prefill_bound),
        )

    def update(self, facts: AlertFacts) -> tuple[Alert, ...]:
        """Alerts active after this poll, most severe first."""
        t = facts.t_monotonic
        th = self.thresholds
        out: list[Alert] = []
        raised: list[str] = []
        for code, rule in self._rules():
            st = self._state.get(code)
            want, msg, value = rule(facts, th, st.level if st else None)
            if st is None:
                if want is None:
                    continue
                st = self._state[code] = _State(want, t, t)
                raised.append(code)
            elif want is not None and want.rank > st.level.rank:
                st.level, st.since = want, t
                raised.append(code)
            elif (want is None or want.rank < st.level.rank) and t - st.since >= th.min_hold_s:
                if want is None:
                    del self._state[code]
                    continue
                st.level, st.since = want, t
            if not msg:  # held through a poll where the fact is unknown: keep the last words
                continue
            out.append(Alert(level=st.level, code=code, message=msg, value=value))
        held_unknown = {a.code for a in out}
        for code, st in self._state.items():
            if code not in held_unknown and code in self._last_messages:
                out.append(Alert(level=st.level, code=code, message=self._last_messages[code].message,
                                 value=self._last_messages[code].value))
        self._last_messages = {a.code: a for a in out}
        self.last_raised = tuple(raised)
        out.sort(key=lambda a: -a.level.rank)
        return tuple(out)

    _last_messages: dict[str, Alert] = field(default_factory=dict, init=False, repr=False)

    def reset(self) -> None:
        """Forget every alert (a new server or model)."""
        self._state.clear()
        self._conn.clear()
        self._last_messages = {}
        self.last_raised = ()


RECORDING_FAILED = "recording_failed"


def with_recording_problem(alerts: Sequence[Alert], problem: str) -> tuple[Alert, ...]:
    """``alerts`` plus the one that says the recording stopped (the monitoring goes on), most severe first."""
    alert = Alert(AlertLevel.WARNING, RECORDING_FAILED,
                  f"Recording stopped: {problem}. The monitoring goes on; free space or pick another file, "
                  "then record again.")
    out = [a for a in alerts if a.code != RECORDING_FAILED]
    out.append(alert)
    out.sort(key=lambda a: -a.level.rank)
    return tuple(out)
