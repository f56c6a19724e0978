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
# launch (microseconds on any GPU), so no stream generates 100,000 tokens a second.
MAX_DECODE_TOK_S = 100_000.0
# Prompt processing is batched, but still bounded by compute: 10^7 tokens a second is far past any device.
MAX_PREFILL_TOK_S = 10_000_000.0
# Memory sizes (weights, KV cache, buffers): an exbibyte is past any machine kvmon runs on.
MAX_BYTES = 2**60


def _ctx(value: int | None, what: str, reasons: dict[str, str], key: str) -> int | None:
    if value is not None and value > MAX_CONTEXT_TOKENS:
        reasons[key] = f"{what} of {value:.3g} tokens is impossible (llama.cpp holds at most {MAX_CONTEXT_TOKENS:,})"
        return None
    return value


def _slot(s: SlotReading, reasons: dict[str, str]) -> SlotReading:
    n_ctx = _ctx(s.n_ctx, "a slot context", reasons, f"slot{s.id}.n_ctx")
    held = _ctx(s.context_tokens, "a slot holding", reasons, f"slot{s.id}.context_tokens")
    if held is not None and n_ctx is not None and held > n_ctx:
        reasons[f"slot{s.id}.context_tokens"] = f"slot {s.id} reports {held:,} tokens held in a {n_ctx:,}-token context"
        held = None
    if n_ctx == s.n_ctx and held == s.context_tokens:
        return s
    return dataclasses.replace(s, n_ctx=n_ctx, context_tokens=held)


def _config(c: ServerConfig, reasons: dict[str, str]) -> ServerConfig:
    changes: dict[str, object] = {}
    for name in ("n_ctx_total", "n_ctx_per_slot"):
        v = getattr(c, name)
        if v is not None and v > MAX_CONTEXT_TOKENS:
            reasons[name] = f"a context of {v:.3g} tokens is impossible (llama.cpp holds at most " \
                            f"{MAX_CONTEXT_TOKENS:,})"
            changes[name] = None
    if c.n_parallel is not None and c.n_parallel > MAX_SLOTS:
        reasons["n_parallel"] = f"{c.n_parallel:.3g} parallel slots is impossible"
        changes["n_parallel"] = None
    if c.kv_bytes_allocated is not None and c.kv_bytes_allocated > MAX_BYTES:
        reasons["kv_allocated_bytes"] = f"a KV cache of {c.kv_bytes_allocated:.3g} bytes is impossible"
        changes["kv_bytes_allocated"] = None
    for name in ("model_buffer_bytes_by_device", "kv_buffer_bytes_by_device", "compute_buffer_bytes_by_device",
                 "device_free_bytes_by_device"):
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
    total_slots = r.total_slots
    if total_slots is not None and total_slots > MAX_SLOTS:
        reasons["total_slots"] = f"the server reports {total_slots:.3g} slots, which is impossible"
        total_slots = None
    config = _config(r.config, reasons)
    changes: dict[str, object] = {}
    for name in ("weight_bytes_vram", "weight_bytes_host"):
        v = getattr(r, name)
        if v is not None and v > MAX_BYTES:
            reasons[name] = f"{v:.3g} bytes of weights is impossible"
            changes[name] = None
    m = r.model
    if m is not None:
        model_changes: dict[str, object] = {}
        if m.weight_bytes is not None and m.weight_bytes > MAX_BYTES:
            reasons["weight_bytes"] = f"a model of {m.weight_bytes:.3g} bytes is impossible"
            model_changes["weight_bytes"] = None
        if m.n_ctx_train is not None and m.n_ctx_train > MAX_CONTEXT_TOKENS:
            reasons["n_ctx_train"] = f"a training context of {m.n_ctx_train:.3g} tokens is impossible"
            model_changes["n_ctx_train"] = None
        if m.n_params is not None and m.n_params > MAX_BYTES:
            reasons["n_params"] = f"{m.n_params:.3g} parameters is impossible"
            model_changes["n_params"] = None
        if model_changes:
            changes["model"] = dataclasses.replace(m, **model_changes)  # type: ignore[arg-type]
    if not reasons:
        return r
    return dataclasses.replace(r, slots=slots, total_slots=total_slots, config=config,  # type: ignore[arg-type]
                               reasons={**r.reasons, **reasons}, **changes)
