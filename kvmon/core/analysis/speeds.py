"""What the poll measured: decode and prefill speeds (from the counter rates), the slots and the depth of the
deepest active conversation, and the KV bytes in use and read per token at that depth.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kvmon.core.analysis.notes import Notes
from kvmon.core.backend import backend_of
from kvmon.core.readings import Provenance, RateSource, ServerReading, SlotReading
from kvmon.core.snapshot import Activity, ConnectionStatus, SlotView
from kvmon.physics.kv import kv_bytes_in_use


@dataclass(frozen=True)
class Speeds:
    """This poll's measured rates; None while idle (no data, never 0)."""

    decode: float | None = None
    prefill: float | None = None
    per_slot: Mapping[int, float | None] = field(default_factory=dict)
    decode_rate_source: RateSource | None = None
    idle: bool = False  # no rate because nothing is generating (not because a counter is missing or withheld)
    processing: bool = False  # no decode rate, yet a request runs (its prompt is processed, or decoding just began)


PROCESSING_REASON = ("a request is running, with no decode speed measured since the last poll: its prompt is being "
                     "processed, or its decoding has only begun")


def request_running(r: ServerReading) -> bool | None:
    """Whether a request is being processed now, as the server says it: its slots, else its running requests; None
    when it says neither."""
    if r.slots:
        return any(sl.processing for sl in r.slots)
    if r.requests_running is not None:
        return r.requests_running > 0
    return None


def busy(r: ServerReading, decode_tok_s: float | None, prefill_tok_s: float | None) -> bool:
    """Whether the server processes a request now: what it says (``request_running``), else whether it moved."""
    running = request_running(r)
    return running if running is not None else bool(decode_tok_s or prefill_tok_s)


def speeds(sample: Any, r: ServerReading) -> tuple[Speeds, Notes]:
    """The rate tracker's sample as Speeds, and where each came from or why there is none."""
    prov: dict[str, Provenance] = {}
    reasons: dict[str, str] = {}
    out = Speeds(decode=getattr(sample, "decode_tok_s", None), prefill=getattr(sample, "prefill_tok_s", None),
                 per_slot=getattr(sample, "per_slot_decode_tok_s", None) or {},
                 decode_rate_source=getattr(sample, "decode_rate_source", None))
    withheld: dict[str, str] = getattr(sample, "reasons", None) or {}  # rates past their physical bound
    if out.decode is not None:
        prov["decode_tok_s"] = Provenance.MEASURED
    else:
        live = "decode_tok_s" not in withheld and (r.live_rate_unavailable_reason is None or r.live_rate_idle)
        running = live and bool(request_running(r))  # what the server says: a prompt counted in between may be done
        out = replace(out, idle=live and not running, processing=running)
        reasons["decode_tok_s"] = (withheld.get("decode_tok_s") or (PROCESSING_REASON if running else None)
                                   or r.live_rate_unavailable_reason or "idle: no tokens generated since the last poll")
    if out.prefill is not None:
        prov["prefill_tok_s"] = Provenance.MEASURED
    elif "prefill_tok_s" in withheld:
        reasons["prefill_tok_s"] = withheld["prefill_tok_s"]
    return out, Notes(prov, reasons)


def activity(rates: Speeds, status: ConnectionStatus) -> Activity:
    """The poll's one activity: loading, decoding (a rate was measured), processing (a request runs, no decode rate
    yet), idle, or unknown (no rate, for another reason)."""
    if status is ConnectionStatus.LOADING and rates.decode is None:
        return Activity.LOADING
    if rates.decode is not None:
        return Activity.DECODING
    if rates.processing:
        return Activity.PROCESSING
    return Activity.IDLE if rates.idle else Activity.UNKNOWN


@dataclass(frozen=True)
class Depth:
    """The slots as shown, the deepest conversation (an active one when any is) and its context depth."""

    slots: tuple[SlotView, ...]
    deepest: SlotReading | None
    context: int | None


def depth(r: ServerReading, per_slot: Mapping[int, float | None]) -> tuple[Depth, Notes]:
    """The deepest active conversation (else the deepest one), or the last request's depth (through the proxy)."""
    slots = tuple(SlotView(id=s.id, n_ctx=s.n_ctx, context_tokens=s.context_tokens, processing=s.processing,
                           decode_tok_s=per_slot.get(s.id)) for s in r.slots)
    active = tuple(s for s in r.slots if s.processing and s.context_tokens is not None)
    pool = active or tuple(s for s in r.slots if s.context_tokens is not None)
    deepest = max(pool, key=lambda s: s.context_tokens or 0) if pool else None
    context = deepest.context_tokens if deepest else None
    pooled = pooled_tokens(r)
    if context is None and pooled is not None:
        if r.requests_running == 1:  # the one running request holds the pool's referenced blocks
            return Depth(slots, None, pooled), Notes({"context_tokens": Provenance.COMPUTED})
        why = (f"{r.requests_running} requests share the KV pool: one conversation's depth is not reported"
               if r.requests_running else "idle: no request running")
        return Depth(slots, None, None), Notes(reasons={"context_tokens": why})
    if context is None and r.last_request is not None and r.last_request.context_tokens is not None:
        context = r.last_request.context_tokens
        notes = Notes({"context_tokens": Provenance.MEASURED})
    elif context is not None:
        estimated = deepest is not None and deepest.context_estimated
        notes = Notes({"context_tokens": Provenance.ESTIMATED if estimated else Provenance.MEASURED})
    else:
        notes = Notes(reasons={"context_tokens": "the server does not report per-conversation context"
                                                 + backend_of(r.backend).depth_hint})
    return Depth(slots, deepest, context), notes


def pooled_tokens(r: ServerReading) -> int | None:
    """Tokens a pooled KV cache (vLLM) holds for its running requests: the usage fraction × the pool's size."""
    if r.slots or r.kv_in_use_fraction is None or not r.config.n_ctx_total:
        return None
    return round(r.kv_in_use_fraction * r.config.n_ctx_total)


def kv_now(r: ServerReading, shape: Any, context: int | None, type_k: str, type_v: str
           ) -> tuple[int | None, float | None, Notes]:
    """(KV bytes all slots hold now, KV bytes one token reads at the deepest depth); None when unknown."""
    computed = Notes({"kv_in_use_bytes": Provenance.COMPUTED})
    kv_in_use = kv_read_now = None
    pooled = pooled_tokens(r)
    if pooled is not None and r.config.kv_bytes_allocated is not None and r.kv_in_use_fraction is not None:
        kv_in_use = round(r.kv_in_use_fraction * r.config.kv_bytes_allocated)
        if shape is not None and context is not None:
            kv_read_now = kv_bytes_in_use(shape, context, type_k, type_v)
        return kv_in_use, kv_read_now, computed
    if shape is not None:
        depths = [s.context_tokens for s in r.slots if s.context_tokens]
        if not depths and context:
            depths = [context]
        if depths:
            kv_in_use = int(sum(kv_bytes_in_use(shape, d, type_k, type_v) for d in depths))
        elif context is not None or (r.slots and all(s.context_tokens is not None for s in r.slots)):
            kv_in_use = 0  # the slots are there and hold nothing (a slot whose holding is unknown says nothing)
        if context is not None:
            kv_read_now = kv_bytes_in_use(shape, context, type_k, type_v)
    return kv_in_use, kv_read_now, computed if kv_in_use is not None else Notes()
