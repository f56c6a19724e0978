"""kvmon's internal names in the user's words: alert codes, reason keys, provenance, the ceiling's suspect inputs, the
forecast's forms and what began a regime. The one formatter the window, the report card, ``once`` and the caption use,
so no code name reaches a person (a test renders every one of them and fails on a snake_case identifier or a "?").
"""

from __future__ import annotations

import re

# what each alert is about (the report card's "Alerts seen", a tooltip), by its stable code
ALERT_NAMES = {
    "connection": "Server not read",
    "ctx_full_soon": "Context filling up",
    "vram_full_soon": "VRAM running out",
    "vram_full": "VRAM full",
    "kv_in_host": "KV cache in host RAM",
    "weights_in_host": "Model partly on the CPU",
    "cpu_only": "Decoding on the CPU",
    "unified_working_set": "GPU memory limit (unified memory)",
    "swap_growing": "Host swapping",
    "log_verbosity": "Placement not in the log",
    "metrics_disabled": "Server metrics off",
    "kv_cache_advice": "Cheaper KV cache type",
    "prompt_cache_ram": "Host prompt cache",
    "prefill_bound": "Waiting on the prompt",
    "model_failed": "A model failed to load",
    "recording_failed": "Recording stopped",
    "prompt_cache_miss": "Prompt read again (cache miss)",
    "prompt_repeated": "The same prompt sent again",
}
LEVEL_WORDS = {"ok": "fine", "info": "note", "warning": "warning", "critical": "critical"}

# where a number came from (Snapshot.provenance's values)
PROVENANCE = {
    "measured": "measured (the server's counters, the device's driver)",
    "computed": "computed by kvmon from the model's shape",
    "user": "your settings",
    "table": "kvmon's table of known hardware",
    "log": "the server's log",
    "command_line": "the server's command line",
    "default": "the server's default (nothing says otherwise)",
    "estimated": "estimated",
}

# where a device's peak memory bandwidth came from (GpuView.bandwidth_source, HostView.host_bandwidth_source), short
# enough for a bar's note ("peak: the published spec") and the status bar ("bandwidth from the driver")
BANDWIDTH_SOURCES = {
    "nvml": "the driver",
    "table": "the published spec",
    "user": "your setting",
    "measured": "a measurement here",
    "host": "host RAM",
}

# what a reason (Snapshot.reasons, a device's reasons) is about, by its key; a key that says it in its own words
# once its unit is dropped ("energy", "power_w", "model") has no row
REASON_NAMES = {
    "analysis": "the analysis",
    "ceiling.speculative": "ceiling with speculative decoding",
    "config.environment": "the server's environment",
    "config.log": "the server's log",
    "config.process": "the server's command line",
    "configured": "configured models",
    "context_tokens": "context in use",
    "cpu_energy_j": "CPU energy",
    "decode_tok_s": "decode speed",
    "draft_kv_allocated_bytes": "draft model's KV cache",
    "dram_bandwidth_util_percent": "memory bandwidth in use",
    "efficiency": "share of the ceiling",
    "energy.joules_per_token": "energy per token",
    "energy.last_reply": "the last reply's energy",
    "forecast.milestones": "forecast at the milestones",
    "health": "server health",
    "host": "host RAM",
    "host_bandwidth_bytes_per_s": "host RAM bandwidth",
    "kv_allocated_bytes": "KV cache allocated",
    "kv_bytes_per_token": "KV cache per token",
    "kv_in_use_fraction": "KV cache in use",
    "kv_type": "KV cache type",
    "latency.replies": "replies",
    "latency.ttft": "time to first token",
    "log": "the server's log",
    "log_placement": "where the log puts the model",
    "metrics": "the server's metrics",
    "model.draft": "draft model",
    "n_ctx": "context size",
    "n_ctx_total": "context cells in all",
    "other_processes_used_bytes": "other programs' memory",
    "parallel": "parallel conversations",
    "pcie.bandwidth_bytes_per_s": "PCIe bandwidth",
    "placement": "where the model lives",
    "prefill_tok_s": "prompt speed",
    "proxy": "kvmon proxy",
    "progress": "loading progress",
    "props": "the server's properties",
    "ram_available_bytes": "RAM available",
    "ram_total_bytes": "RAM",
    "server_rss_bytes": "the server's resident memory",
    "server_used_bytes": "the server's memory",
    "shape": "model shape",
    "speculative": "speculative decoding",
    "speculative.by_position": "acceptance by draft position",
    "spill_used_bytes": "spilled memory",
    "state": "server state",
    "swap_total_bytes": "swap",
    "swap_used_bytes": "swap in use",
    "v1_models": "the model list",
    "vram": "memory split",
    "vram_free_bytes": "free VRAM",
    "vram_split": "memory split",
    "vram_total_bytes": "VRAM",
    "vram_used_bytes": "VRAM in use",
    "weight_bytes": "weights",
    "weight_bytes_host": "weights in host RAM",
    "weight_bytes_read_per_token": "weights read per token",
    "working_set_limit_bytes": "GPU working-set limit",
}
_UNITS = re.compile(r"_(bytes_per_s|bytes_per_token|tok_s|bytes|percent|per_s|s|j|w)$")
_NUMBERED = re.compile(r"^(gpu|slot)(\d+)\.(.+)$")

# the ceiling input a measured speed above the ceiling suspects (CeilingSuspect.input)
SUSPECTS = {"bandwidth": "the peak bandwidth used", "placement": "where kvmon thinks the model lives",
            "weights_read_per_token": "the weights read per token", "kv_in_use": "the KV cache read per token"}

# the forecast's forms (Forecast.fit_form)
FIT_FORMS = {"ceiling_scaled": "the measured speed scaled along the ceiling (too few depths for more)",
             "bandwidth": "bytes read per token at a fitted bandwidth",
             "bandwidth+attention": "bytes read per token at a fitted bandwidth, plus attention work growing with "
                                    "depth",
             "context_linear": "a straight line in context depth"}

# why decode runs below the ceiling (SlowdownCause.code, and the verdict's cause when the headline names one)
CAUSE_NAMES = {"memory_clock": "Memory clock held down", "core_clock": "GPU clock held down",
               "pcie_link": "PCIe link below its maximum", "other_processes": "Other programs on the GPU",
               "cpu_contended": "CPU cores taken by other programs", "slower_than_before": "Slower than earlier",
               "drafting": "Speculative drafting", "client_slower": "The client reads slowly",
               "unexplained": "Attention and kernel overhead"}

# what the speed-vs-context plot writes where a regime began, before how the speed moved ("reloaded: 70 → 7.0 tok/s");
# no mark for the first regime or another model (nothing to compare)
REGIME_MARKS = {"n_ctx": "new context size", "cache_types": "new cache types", "slots": "new slot count",
                "devices": "new devices", "placement": "moved in memory", "reload": "reloaded"}


def _plain(key: str) -> str:
    """A key no table names, as words: units dropped, underscores and dots made spaces."""
    return _UNITS.sub("", key).replace(".", " ").replace("_", " ").strip() or key


def alert_name(code: str) -> str:
    """What an alert is about ("KV cache in host RAM"), by its code."""
    return ALERT_NAMES.get(code) or _plain(code).capitalize()


def level_word(level: str) -> str:
    """An alert or verdict level as people say it."""
    return LEVEL_WORDS.get(level, _plain(level))


def provenance_words(value: str) -> str:
    """Where a number came from ("the server's command line"), by its provenance value."""
    return PROVENANCE.get(value) or _plain(value)


def bandwidth_source_words(source: str | None) -> str:
    """Where a peak bandwidth came from ("the published spec"), by its source; "an unknown source" for None."""
    return "an unknown source" if source is None else BANDWIDTH_SOURCES.get(source) or _plain(source)


def reason_name(key: str) -> str:
    """What a reason is about ("decode speed", "GPU 1: memory split"), by its key."""
    if key in REASON_NAMES:
        return REASON_NAMES[key]
    numbered = _NUMBERED.match(key)
    if numbered:
        what, n, rest = numbered.groups()
        return f"{'GPU' if what == 'gpu' else 'slot'} {n}: {reason_name(rest)}"
    head, dot, rest = key.partition(".")
    if dot and head == "serving":
        return f"the model list: {reason_name(rest)}"
    return _plain(key)


def suspect_words(input_: str) -> str:
    """The ceiling input suspected of being wrong, in words."""
    return SUSPECTS.get(input_) or _plain(input_)


def fit_words(form: str | None) -> str:
    """The forecast's form in words ("" when there is no fit)."""
    return "" if form is None else FIT_FORMS.get(form) or _plain(form)


def cause_name(code: str) -> str:
    """What a slowdown cause is about ("Memory clock held down"), by its code."""
    return CAUSE_NAMES.get(code) or _plain(code).capitalize()


def regime_mark(cause: str | None) -> str | None:
    """What the plot writes where a regime began ("new context size"), None where it marks nothing."""
    return REGIME_MARKS.get(cause or "")
