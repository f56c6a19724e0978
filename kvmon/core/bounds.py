"""How large each kind of reading can physically be, and the check that holds every server reading to it.

A value past its bound is a bug in the server, a wrapped counter or a hostile answer, never a fact: kvmon shows it
as unknown with a reason. One table, read by the rate tracker (for speeds) and by ``plausible_reading`` (for what
the server says about its slots and context), which the analysis applies to every reading before it uses one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from kvmon.core.readings import ServerConfig, ServerReading, SlotReading

# llama.cpp keeps n_ctx (per context and per sequence) in a uint32.
MAX_CONTEXT_TOKENS = 2**32 - 1
# llama-server's slots and Ollama's OLLAMA_NUM_PARALLEL: each slot holds its own sequence state; no build runs
# anywhere near this many.
MAX_SLOTS = 65_536
# One conversation's decode: every token is at least one pass through the model's layers, each at least one kernel
# launch (microseconds on any GPU), so no stream generates 100,000 tokens a second; nor do a server's slots together
# (batched decode on the largest machines reaches tens of thousands).
MAX_DECODE_TOK_S = 100_000.0
# Prompt processing is batched, but still bounded by compute: 10^7 tokens a second is far past any device.
MAX_PREFILL_TOK_S = 10_000_000.0
# Memory sizes (weights, KV cache, buffers): an exbibyte is past any machine kvmon runs on.
MAX_BYTES = 2**60
# Memory devices on one machine (GPUs, unified memory, host RAM): a log or an exporter naming more is not a fact.
MAX_DEVICES = 64


# (field, bound, what it is, unit) for each kind of reading the bounds hold
_CONFIG = (("n_ctx_total", MAX_CONTEXT_TOKENS, "a context", "tokens"),
           ("n_ctx_per_slot", MAX_CONTEXT_TOKENS, "a context", "tokens"),
           ("n_parallel", MAX_SLOTS, "a slot count", "slots"),
           ("kv_bytes_allocated", MAX_BYTES, "a KV cache", "bytes"))
_READING = (("total_slots", MAX_SLOTS, "a slot count", "slots"),
            ("weight_bytes_vram", MAX_BYTES, "weights in VRAM", "bytes"),
            ("weight_bytes_host", MAX_BYTES, "weights in host RAM", "bytes"))
_POOL = (("requests_running", MAX_SLOTS * 1024, "a running request count", "requests"),
         ("requests_waiting", 2**32, "a waiting request count", "requests"))
_MODEL = (("weight_bytes", MAX_BYTES, "a model", "bytes"),
          ("n_ctx_train", MAX_CONTEXT_TOKENS, "a training context", "tokens"),
          ("n_params", MAX_BYTES, "a parameter count", "parameters"))
_BUFFERS = ("model_buffer_bytes_by_device", "kv_buffer_bytes_by_device", "compute_buffer_bytes_by_device",
            "device_free_bytes_by_device")


def _past(obj: object, checks: tuple[tuple[str, float, str, str], ...], reasons: dict[str, str],
          prefix: str = "") -> dict[str, object]:
    """The fields of ``obj`` past their bound, as changes to None, each with its reason."""
    changes: dict[str, object] = {}
    for name, bound, what, unit in checks:
        v = getattr(obj, name)
        if v is not None and v > bound:
            reasons[prefix + name] = f"{what} of {v:.3g} {unit} is impossible (at most {bound:,.0f})"
            changes[name] = None
    return changes


def _slot(s: SlotReading, reasons: dict[str, str]) -> SlotReading:
    bounds = (("n_ctx", MAX_CONTEXT_TOKENS, f"slot {s.id}'s context", "tokens"),
              ("context_tokens", MAX_CONTEXT_TOKENS, f"slot {s.id} holding", "tokens"))
    changes = _past(s, bounds, reasons, f"slot{s.id}.")
    n_ctx = changes.get("n_ctx", s.n_ctx)
    held = changes.get("context_tokens", s.context_tokens)
    if isinstance(held, int) and isinstance(n_ctx, int) and held > n_ctx:
        reasons[f"slot{s.id}.context_tokens"] = f"slot {s.id} reports {held:,} tokens held in a {n_ctx:,}-token context"
        changes["context_tokens"] = None
    return dataclasses.replace(s, **changes) if changes else s  # type: ignore[arg-type]


def _config(c: ServerConfig, reasons: dict[str, str]) -> ServerConfig:
    changes = _past(c, _CONFIG, reasons)
    for name in _BUFFERS:
        sizes: Mapping[str, int] = getattr(c, name)
        if any(v > MAX_BYTES for v in sizes.values()):
            reasons[name] = f"{name.replace('_', ' ')}: a size past {MAX_BYTES:.3g} bytes is impossible"
            changes[name] = {k: v for k, v in sizes.items() if v <= MAX_BYTES}
    if not changes:
        return c
    prov = {k: v for k, v in c.provenance.items() if changes.get(k, True) is not None}
    return dataclasses.replace(c, **changes, provenance=prov)  # type: ignore[arg-type]


def plausible_reading(r: ServerReading) -> ServerReading:
    """``r`` with every value past its physical bound made unknown, each with its reason in ``reasons``."""
    reasons: dict[str, str] = {}
    slots = tuple(_slot(s, reasons) for s in r.slots)
    changes = _past(r, _READING + _POOL, reasons)
    frac = r.kv_in_use_fraction
    if frac is not None and not 0.0 <= frac <= 1.0:
        reasons["kv_in_use_fraction"] = f"a KV cache usage of {frac:.3g} is impossible (a fraction, 0 to 1)"
        changes["kv_in_use_fraction"] = None
    config = _config(r.config, reasons)
    if r.model is not None and (model_changes := _past(r.model, _MODEL, reasons)):
        changes["model"] = dataclasses.replace(r.model, **model_changes)  # type: ignore[arg-type]
    if not reasons:
        return r
    return dataclasses.replace(r, slots=slots, config=config, reasons={**r.reasons, **reasons},  # type: ignore[arg-type]
                               **changes)
