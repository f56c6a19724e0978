"""The alert rules: each reads one poll's facts (``kvmon.core.alert_types``) against the thresholds and says its level,
its message (numbers and what to do), its value and its headline (the news in one sentence, for the verdict).

Every rule raises at one threshold and clears only past a second, safer one (the engine, ``kvmon.core.alerts``, holds
a raised alert ``min_hold_s``). Messages are computed from the numbers of this poll.
"""

from __future__ import annotations

from kvmon.core.alert_types import NOTHING, AlertFacts, AlertThresholds, GpuVramFacts, RuleResult
from kvmon.core.backend import backend_of
from kvmon.core.snapshot import AlertLevel
from kvmon.core.units import MIB, fmt_bytes, fmt_count, fmt_duration, fmt_tok_s_approx
from kvmon.physics.cache_types import DEFAULT_CACHE_TYPE


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
        return NOTHING
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
    # with VRAM full a larger context is no way out: it would spill (the reload that does it is the cliff)
    full = next((g for g in f.gpus if vram_is_full(g, th, None)), None) if f.connected else None
    larger = (f"start a new chat (VRAM is full on GPU {full.index}: a larger {knob} would spill to host RAM)"
              if full is not None else None)
    if left <= 0:
        head = f"Context full{where} ({fmt_count(n_ctx)} tokens)"
        fix = larger or f"start a new chat or restart with a larger {knob}"
        msg = f"{head}: the server will truncate or stop; {fix}"
        headline = f"{head}: {larger or 'the server truncates or stops; start a new chat'}"
    else:
        when = ""
        if secs is not None and f.decode_tok_s:
            when = f" ({fmt_duration(secs)} at {f.decode_tok_s:.0f} tok/s)"
        fix = larger or f"start a new chat or raise {knob}"
        msg = (f"Context full{where} in ~{_approx_tokens(left)} tokens{when}: {fmt_count(ctx)} of {fmt_count(n_ctx)} "
               f"used; {fix}")
        headline = f"Context full{where} in ~{_approx_tokens(left)} tokens: {fix}"
    return level, msg, float(left), headline


def rule_vram_full_soon(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """Free VRAM falling: warn when, at the trend of the last minute, it runs out soon."""
    falling = [g for g in f.gpus if g.seconds_until_full is not None
               and not (f.connected and vram_is_full(g, th, None))]  # full now: vram_full says
    worst = min(falling, key=lambda g: g.seconds_until_full or 0.0, default=None)
    if worst is None or worst.seconds_until_full is None:
        return NOTHING
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
    others = worst.other_processes_growth_bytes is not None and worst.other_processes_growth_bytes >= 64 * MIB
    if others:
        cause = f"another program took {fmt_bytes(worst.other_processes_growth_bytes)} in {window}"
    elif worst.free_drop_bytes:  # a fall of 0 from first to last sample says nothing: use the trend wording
        cause = f"free VRAM fell {fmt_bytes(worst.free_drop_bytes)} in {window}"
    else:
        cause = "free VRAM is falling"
    msg = (f"VRAM full in {fmt_duration(secs)} on {gpu}: {cause}; {fmt_bytes(worst.vram_free_bytes)} left. "
           "Then the KV cache or weights spill to host RAM and decode slows sharply")
    headline = (f"VRAM full in {fmt_duration(secs)} on GPU {worst.index}: "
                f"{'another program is taking VRAM' if others else 'free VRAM is falling'}")
    return level, msg, secs, headline


def vram_is_full(g: GpuVramFacts, th: AlertThresholds, current: AlertLevel | None) -> bool:
    """Free VRAM under the full mark (over the clear mark once warned): a discrete GPU with no room left."""
    if g.unified or g.vram_free_bytes is None or not g.vram_total_bytes:
        return False
    return g.vram_free_bytes < (th.vram_full_clear_bytes if current is not None else th.vram_full_free_bytes)


def rule_vram_full(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """VRAM full now: a standing warning while it lasts (a reload, a longer context or another model spills), until
    the spill itself is the news (part of the model in host RAM) or VRAM frees."""
    spilled = bool(f.kv_host_fraction or f.weights_host_bytes or f.cpu_only)
    full = [g for g in f.gpus if vram_is_full(g, th, current)]
    if not f.connected or spilled or not full:
        return NOTHING
    g = min(full, key=lambda x: x.vram_free_bytes or 0)
    gpu = f"GPU {g.index}" + (f" ({g.name})" if g.name else "")
    knob = backend_of(f.backend).context_setting
    held = (f"; other programs hold {fmt_bytes(g.other_processes_bytes)}"
            if g.other_processes_bytes and g.other_processes_bytes >= 256 * MIB else "")
    msg = (f"VRAM full on {gpu}: {fmt_bytes(g.vram_free_bytes)} free of {fmt_bytes(g.vram_total_bytes)}{held}. "
           f"A reload, a larger {knob} or another model would put layers and KV cache in host RAM, where decode "
           "slows sharply; free VRAM first")
    headline = f"VRAM full on GPU {g.index}: a reload or a longer context spills to host RAM"
    return AlertLevel.WARNING, msg, float(g.vram_free_bytes or 0), headline


def rule_kv_in_host(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """Part of the KV cache lives in host RAM (no room in VRAM, or -nkvo): the spill cliff."""
    frac = f.kv_host_fraction
    if frac is None:
        return NOTHING
    level = AlertLevel.CRITICAL if frac >= th.host_fraction_raise or (current is not None and frac > 0) else None
    via = f.kv_host_via or "host RAM"
    amount = f"{fmt_bytes(f.kv_host_bytes)}, " if f.kv_host_bytes else ""
    head = f"KV cache in host RAM ({amount}{frac:.0%})"
    if f.kv_host_cap_tok_s:
        head += f": decode capped at ~{f.kv_host_cap_tok_s:.0f} tok/s by {via}"
    msg = f"{head}; {_kv_in_host_fix(f)}"
    weights = f"{fmt_bytes(f.weights_host_bytes)} of the weights and " if f.weights_host_bytes else ""
    kv = f"{fmt_bytes(f.kv_host_bytes)} of the KV cache" if f.kv_host_bytes else f"{frac:.0%} of the KV cache"
    headline = f"Spilled: {weights}{kv} in host RAM{_capped(f.kv_host_cap_tok_s, f)}"
    return level, msg, frac, headline


def _capped(cap: float | None, f: AlertFacts) -> str:
    """" — capped at ~11 tok/s (70 tok/s before the reload)": the spill's price, against the speed before it."""
    if not cap:
        return ""
    before = (f" ({f.decode_before_tok_s:.0f} tok/s before {f.decode_before_what})"
              if f.decode_before_tok_s and f.decode_before_what and f.decode_before_tok_s > cap else "")
    return f" — capped at ~{cap:.0f} tok/s{before}"


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
        return NOTHING
    frac = host / total
    level = AlertLevel.WARNING if frac >= th.host_fraction_raise or (current is not None and host > 0) else None
    cap = f"; decode capped at ~{f.weights_host_cap_tok_s:.0f} tok/s" if f.weights_host_cap_tok_s else ""
    b = backend_of(f.backend)
    smaller = f"a smaller context ({b.context_setting}) or quantization would fit it"
    hint = f"raise {b.offload_setting} if VRAM allows, or {smaller}" if b.offload_setting else smaller
    kv = " with their KV cache" if f.kv_with_host_layers else ""
    msg = (f"Model partly in host RAM: {fmt_bytes(host)} of {fmt_bytes(total)} ({frac:.0%}) on the CPU{kv}{cap}; "
           f"{hint}")
    headline = (f"Partly on the CPU: {fmt_bytes(host)} of the {fmt_bytes(total)} of weights in host RAM"
                f"{_capped(f.weights_host_cap_tok_s, f)}")
    return level, msg, frac, headline


def rule_cpu_only(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """The model runs on the CPU: worth a line always, a warning when a GPU sits idle beside it."""
    if not f.cpu_only:
        return NOTHING
    bw = f.host_bandwidth_bytes_per_s
    read = f"read at {bw / 1e9:.0f} GB/s ({f.host_bandwidth_source or 'unknown source'})" if bw else \
        "read at a host bandwidth kvmon does not know yet (settings, --bandwidth host=GB/s)"
    c = f.cpu_only_cap_tok_s  # two figures: the line stands while the context grows (the chart has the exact one)
    cap = f": the ceiling is {fmt_tok_s_approx(c)} at this depth" if c else ""
    if f.cpu_only_idle_gpu:
        offload = backend_of(f.backend).offload_setting
        fix = f"raise {offload} or use a smaller model" if offload else "use a smaller model"
        capped = f" — capped at {fmt_tok_s_approx(c)}" if c else ""
        return (AlertLevel.WARNING, f"Model runs on the CPU although {f.cpu_only_idle_gpu} is there: weights and "
                f"KV cache in host RAM, {read}{cap}; {fix}", None,
                f"On the CPU although {f.cpu_only_idle_gpu} is there{capped}")
    return (AlertLevel.INFO, f"Decoding on the CPU: weights and KV cache in host RAM, {read}{cap}", None,
            "Decoding on the CPU, from host RAM")


def rule_prefill_bound(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """The last reply spent longer on its prompt than on its answer: the wait is prefill (compute), not the bus."""
    ttft, gen = f.last_ttft_s, f.last_generate_s
    if ttft is None or gen is None or ttft < th.prefill_bound_min_s or ttft < gen:
        return NOTHING
    prompt = (f" ({f.last_prompt_tokens:,} prompt tokens at {f.last_prefill_tok_s:,.0f} tok/s)"
              if f.last_prompt_tokens and f.last_prefill_tok_s else "")
    return (AlertLevel.INFO, f"Prefill-bound: the last reply waited {ttft:.1f} s for its first token{prompt}, longer "
            f"than the {gen:.1f} s it generated for; the prompt, not the memory bus, is the wait (an unchanged "
            "conversation prefix stays cached; a larger batch size or flash attention speeds prefill up)", ttft, "")


def rule_unified_working_set(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """Unified memory: the cliff is the GPU's working-set limit (then macOS pages and swaps), not PCIe."""
    worst = max(f.unified, key=lambda u: u.need_bytes / u.limit_bytes if u.limit_bytes else 0.0, default=None)
    if worst is None or not worst.limit_bytes:
        return NOTHING
    frac = worst.need_bytes / worst.limit_bytes
    level: AlertLevel | None = None
    if frac > 1.0:
        level = AlertLevel.CRITICAL
    elif frac >= th.unified_warn_fraction or (current is not None and frac >= th.unified_clear_fraction):
        level = AlertLevel.WARNING
    est = " (estimated: install pyobjc-framework-Metal to read it)" if worst.limit_source == "estimated" else ""
    limit = f"{fmt_bytes(worst.limit_bytes)} GPU working-set limit on {worst.name}{est}"
    # the limit, not free RAM, is the cliff: RAM may be free beyond it that the GPU may not use
    if frac > 1.0:
        head = f"Model and caches ({fmt_bytes(worst.need_bytes)}) exceed the {limit}: macOS pages GPU memory"
        headline = (f"Over the GPU memory limit: model and caches need {fmt_bytes(worst.need_bytes)}, more than the "
                    f"{fmt_bytes(worst.limit_bytes)} Metal lets the GPU use")
    else:
        left = fmt_bytes(worst.limit_bytes - worst.need_bytes)
        head = (f"Model and caches need {fmt_bytes(worst.need_bytes)} of the {limit} ({left} left under the "
                "limit, whatever RAM is free)")
        headline = (f"Near the GPU memory limit: model and caches need {fmt_bytes(worst.need_bytes)} of the "
                    f"{fmt_bytes(worst.limit_bytes)} Metal lets the GPU use ({left} left under it)")
    b = backend_of(f.backend)
    smaller = f.smaller_kv_type
    flags = b.cache_type_flags(smaller) if smaller and b.offers_cache_type(smaller) else None
    fix = f"lower {b.context_setting}" + (f" or use {flags}" if flags else "")
    return level, f"{head}; past it decode slows sharply — {fix} (or raise iogpu.wired_limit_mb)", frac, headline


def rule_swap_growing(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """Host swap grows while the model lives in host or unified memory: the weights or the cache are paged out."""
    grow = f.swap_growth_bytes
    if grow is None:
        return NOTHING
    limit = th.swap_warn_growth_bytes if current is None else th.swap_warn_growth_bytes // 4
    level = AlertLevel.WARNING if grow >= limit else None
    used = f" ({fmt_bytes(f.swap_used_bytes)} in use)" if f.swap_used_bytes else ""
    return (level, f"Host swapping: swap grew {fmt_bytes(grow)} in the last minute{used} while the model lives in "
            "RAM; close other applications or use a smaller model or context", float(grow),
            f"Swapping: swap grew {fmt_bytes(grow)} in the last minute while the model lives in RAM")


def rule_log_hint(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """The server's log was given but hides where the model lives (llama-server without -lv 4)."""
    if not f.log_hint:
        return NOTHING
    return AlertLevel.INFO, f"Placement unknown: {f.log_hint}", None, ""


def rule_metrics_disabled(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """llama-server without --metrics: prefill speed and request counters are unavailable."""
    b = backend_of(f.backend)
    if b.metrics_setting is None or f.metrics_enabled is not False:
        return NOTHING
    return (AlertLevel.INFO, f"/metrics is disabled: start {b.label} with {b.metrics_setting} "
            "(prefill speed and request counters need it)", None, "")


def rule_cache_advice(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """A cheaper KV cache type would free VRAM (and usually be faster at depth): say which flags."""
    if not f.advice:
        return NOTHING
    limit = th.advice_clear_freed_bytes if current is not None else th.advice_min_freed_bytes
    # the first (mildest) cheaper type that frees enough: q8_0 before q4_0
    best = next((a for a in f.advice if a.freed_bytes >= limit), None)
    if best is None:
        return NOTHING
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
    return AlertLevel.INFO, claim, float(best.freed_bytes), ""


def rule_prompt_cache_ram(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """llama-server keeps idle conversations in a host-RAM prompt cache (--cache-ram, 8 GiB by default): say so
    when it may grow past the RAM still available, with a limit that fits."""
    limit, avail = f.prompt_cache_limit_bytes, f.ram_available_bytes
    setting = backend_of(f.backend).prompt_cache_setting
    if limit is None or limit == 0 or avail is None or setting is None:
        return NOTHING
    keep = max(th.prompt_cache_min_suggest_bytes, (avail // 2) // (256 * MIB) * (256 * MIB))
    raise_at = avail if current is None else int(avail * th.prompt_cache_clear_fraction)
    if limit != -1 and limit <= raise_at:
        return NOTHING
    flag = setting.format(mib=keep // MIB)
    size = "has no size limit (--cache-ram -1)" if limit == -1 else f"may grow to {fmt_bytes(limit)} (--cache-ram)"
    return (AlertLevel.INFO, f"The host prompt cache {size} with {fmt_bytes(avail)} of RAM available: `{flag}` "
            "keeps it within (0 turns it off)", float(limit), "")
