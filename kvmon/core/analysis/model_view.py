"""The model view: what is known about the loaded model, its context, cache types and KV sizes, and how.

From the server's reading (its model info, slots and config) and the physics of its shape; a number the server
does not give is computed, estimated or left unknown, and says which (``provenance`` / ``reasons``).
"""

from __future__ import annotations

from typing import Any

from kvmon.core.analysis import consistency
from kvmon.core.analysis.notes import Notes
from kvmon.core.readings import ModelInfo, Provenance, ServerConfig, ServerReading
from kvmon.core.snapshot import ModelView
from kvmon.physics import kv as kv_mod
from kvmon.physics import quant
from kvmon.physics import weights as weights_mod
from kvmon.physics.shape import ModelShape


def model_view(r: ServerReading) -> tuple[ModelView, Any, Notes]:
    """The model as the Snapshot shows it, its shape (None when unknown), and its notes (with the reading's)."""
    m, cfg = r.model or ModelInfo(), r.config
    shape = m.shape
    cprov = cfg.provenance
    prov: dict[str, Provenance] = {}
    reasons = dict(r.reasons)

    type_k, type_v = cfg.type_k, cfg.type_v
    if type_k is None or type_v is None:
        type_k, type_v = type_k or "f16", type_v or "f16"
        prov["kv_type"] = Provenance.DEFAULT
        reasons["kv_type"] = "KV cache type not reported by the server: the default, f16, assumed"
    else:
        prov["kv_type"] = cprov.get("type_k", Provenance.LOG)

    n_slots = r.total_slots or (len(r.slots) or None) or cfg.n_parallel
    unified = r.kv_unified if r.kv_unified is not None else cfg.kv_unified
    slot_ctx = [s.n_ctx for s in r.slots if s.n_ctx]
    n_ctx = max(slot_ctx) if slot_ctx else None
    if n_ctx is not None:
        prov["n_ctx"] = Provenance.MEASURED
    elif cfg.n_ctx_total and n_slots:
        n_ctx = cfg.n_ctx_total if unified else cfg.n_ctx_total // max(1, n_slots)
        prov["n_ctx"] = cprov.get("n_ctx_total", Provenance.LOG)
    elif cfg.n_ctx_per_slot:  # one request's limit where the cache is one pool (vLLM's max_model_len)
        n_ctx = cfg.n_ctx_per_slot
        prov["n_ctx"] = cprov.get("n_ctx_per_slot", Provenance.MEASURED)
    else:
        reasons["n_ctx"] = "the server did not report its context size"
    n_ctx_total = cfg.n_ctx_total
    if n_ctx_total is not None:
        prov["n_ctx_total"] = cprov.get("n_ctx_total", Provenance.LOG)
    elif slot_ctx:
        n_ctx_total = max(slot_ctx) if unified else sum(slot_ctx)
        prov["n_ctx_total"] = Provenance.COMPUTED
    argv_read = cprov.get("model_path") == "command_line"  # the server's own command line was read
    if cfg.fit and argv_read and cprov.get("n_ctx_total") not in ("command_line", "user") and n_ctx_total:
        mib = ", ".join(f"{b // (1024 * 1024)} MiB" for b in cfg.fit_target_bytes or ())
        margin = f" to leave {mib} free on each device" if mib else ""
        reasons["n_ctx_total"] = f"-c not given: --fit chose the context at load{margin} (--fit-target)"

    alloc: int | None = None
    if cfg.kv_bytes_allocated is not None:
        alloc = int(cfg.kv_bytes_allocated)
        prov["kv_allocated_bytes"] = cprov.get("kv_bytes_allocated", Provenance.LOG)
    elif shape is not None and n_ctx_total:
        alloc = kv_alloc_bytes(shape, n_ctx_total, n_slots or 1, bool(unified), type_k, type_v, cfg)
        prov["kv_allocated_bytes"] = Provenance.COMPUTED
    else:
        reasons["kv_allocated_bytes"] = "needs the model shape and the server's total context"

    weight_bytes, weight_src, weight_why = _weights(r, alloc)
    if weight_src is not None:
        prov["weight_bytes"] = weight_src
    if weight_why:
        reasons["weight_bytes"] = weight_why
    else:
        reasons.pop("weight_bytes", None)

    kv_per_token = rec = None
    read_per_token: float | None = None
    if shape is not None:
        kv_per_token = float(kv_mod.kv_bytes_per_token(shape, type_k, type_v).total)
        prov["kv_bytes_per_token"] = Provenance.COMPUTED
        rec = kv_mod.recurrent_state_bytes(shape, n_slots or 1) or None
        if rec is not None:
            prov["recurrent_state_bytes"] = Provenance.COMPUTED
        if weight_bytes is not None:
            wr = weights_mod.weight_bytes_read_per_token(shape, weight_bytes)
            read_per_token = float(wr.bytes)
            prov["weight_bytes_read_per_token"] = Provenance.ESTIMATED if wr.estimated else Provenance.COMPUTED
            if wr.estimated and wr.note:
                reasons["weight_bytes_read_per_token"] = wr.note
    else:
        reasons["kv_bytes_per_token"] = "model shape unknown (no GGUF metadata)"
        if weight_bytes is not None:
            read_per_token = float(weight_bytes)
            prov["weight_bytes_read_per_token"] = Provenance.ESTIMATED
            reasons["weight_bytes_read_per_token"] = "model shape unknown: all weights assumed read (dense)"
    if cfg.recurrent_bytes_allocated is not None:  # the server's own size line
        rec = int(cfg.recurrent_bytes_allocated)
        prov["recurrent_state_bytes"] = cprov.get("recurrent_bytes_allocated", Provenance.LOG)

    view = ModelView(
        name=m.name, server_name=m.server_name or m.name, arch=m.arch or getattr(shape, "arch", None),
        n_params=m.n_params, quantization=m.quantization,
        weight_bytes=weight_bytes, weight_bytes_read_per_token=read_per_token,
        n_layers=getattr(shape, "n_layers", None) or cfg.total_layers, n_ctx=n_ctx, n_ctx_total=n_ctx_total,
        n_ctx_train=m.n_ctx_train or getattr(shape, "n_ctx_train", None),
        n_slots=n_slots, kv_unified=unified, kv_type_k=type_k, kv_type_v=type_v, flash_attn=cfg.flash_attn,
        kv_bytes_per_token=kv_per_token, kv_allocated_bytes=alloc, recurrent_state_bytes=rec,
        fit=cfg.fit, fit_target_bytes=cfg.fit_target_bytes,
        shape_note="; ".join(shape.notes) if shape is not None and bool(getattr(shape, "notes", ())) else None,
        shape=shape if isinstance(shape, ModelShape) else None,
    )
    return view, shape, Notes(prov, reasons)


def kv_alloc_bytes(shape: Any, n_ctx: int, n_seq: int, unified: bool, type_k: str, type_v: str,
                   cfg: ServerConfig) -> int:
    """The K+V bytes llama.cpp allocates at load for ``n_ctx`` cells (its KV size line; a hybrid's recurrent
    state is apart), with the batch, --swa-full and flash-attention settings it uses."""
    return int(kv_mod.kv_allocation(
        shape, n_ctx, n_seq=n_seq, unified=unified, type_k=type_k, type_v=type_v,
        n_ubatch=cfg.n_ubatch or kv_mod.DEFAULT_N_UBATCH, n_batch=cfg.n_batch or kv_mod.DEFAULT_N_BATCH,
        swa_full=bool(cfg.swa_full),
        flash_attn=cfg.flash_attn != "off",  # "auto" lays the cache out for flash attention, as "on" does
    ).kv_bytes)


def _weights(r: ServerReading, alloc: int | None) -> tuple[int | None, Provenance | None, str | None]:
    """(the model's weight bytes, where they came from, what to say of them): the first of what the server or its
    file says, the log's model buffers, bits per weight × parameters, the loaded size less the KV cache, that nothing
    contradicts (``consistency``)."""
    m, cfg = r.model or ModelInfo(), r.config
    cands: list[consistency.WeightCandidate] = []
    if m.weight_bytes is not None:
        src = m.weight_bytes_source or Provenance.MEASURED
        cands.append(consistency.WeightCandidate(m.weight_bytes, src, r.reasons.get("weight_bytes"),
                                                 "the server's figure"))
    if cfg.model_buffer_bytes_by_device:
        cands.append(consistency.WeightCandidate(sum(cfg.model_buffer_bytes_by_device.values()), Provenance.LOG, None,
                                                 "the log's model buffers"))
    est, how = quant.estimated_weight_bytes(m.n_params, m.quantization)
    if est is not None:
        cands.append(consistency.WeightCandidate(est, Provenance.ESTIMATED, how, "bits per weight × parameters"))
    if r.weight_bytes_vram is not None and r.weight_bytes_host is not None and alloc is not None:
        # Ollama's loaded size holds weights + KV cache (+ compute graph): take the computed KV out
        cands.append(consistency.WeightCandidate(
            int(r.weight_bytes_vram + r.weight_bytes_host - alloc), Provenance.ESTIMATED,
            "the server's loaded size minus the computed KV cache (includes compute buffers)",
            "the loaded size less the KV cache"))
    chosen, contradicted = consistency.choose_weights(cands, m.n_params)
    against = "; ".join(f"{c}: contradicted" for c in contradicted)
    if chosen is None:
        why = against or r.reasons.get("weight_bytes") or "model size not reported"
        return None, None, why + (f"; no estimate: {how}" if against and est is None and how else "")
    how_chosen = chosen.how if chosen.provenance != Provenance.MEASURED or chosen.how else None
    return chosen.weight_bytes, chosen.provenance, "; ".join(x for x in (against, how_chosen) if x) or None


def cache_bytes(model: ModelView) -> int | None:
    """What the model's caches hold in memory (VRAM split, spill, host share): the KV cache plus a hybrid's
    recurrent state, which llama.cpp keeps beside it on the same devices."""
    if model.kv_allocated_bytes is None:
        return None
    return model.kv_allocated_bytes + (model.recurrent_state_bytes or 0)
