"""Speculative decoding's draft context: what it holds in memory and what each drafted token reads.

llama-server drafts with a draft model (``-md``: its own weights) or with the model's own multi-token-prediction
layers (``--spec-type draft-mtp``: weights the model already holds), and gives the drafter a context of its own
beside the model's: the same cells and sequences, its own cache types (``-ctkd``/``-ctvd``, f16 by default). Its KV
cache is allocated at load like the model's (its ``llama_kv_cache: size`` line follows the draft model's load in
the log), so it is memory the model server holds, and each drafted token reads the drafter's weights and its KV
at the current depth. The figures here feed the memory bars, the spill estimate and the speculative ceiling.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from kvmon.core.analysis.model_view import kv_alloc_bytes
from kvmon.core.analysis.notes import Notes
from kvmon.core.readings import MTP_LAYERS, ModelInfo, Provenance, ServerReading
from kvmon.core.snapshot import ModelView
from kvmon.physics import kv as kv_mod
from kvmon.physics.cache_types import cache_type
from kvmon.physics.shape import ModelShape

DEFAULT_TYPE = "f16"  # llama-server's draft cache types when -ctkd / -ctvd are not given
MTP_NAME = "the model's MTP layers"
MTP_UNREAD = ("the server drafts with the model's MTP layers (draft-mtp), and the model file's nextn_predict_layers "
              "and their tensors are not read here: their reads and KV cache are not known")


@dataclass(frozen=True)
class DraftContext:
    """The drafter: its weights in memory and those one drafted token reads, and the shape of its KV cache."""

    name: str
    weight_bytes: int | None  # in memory beside the model's (None: the model's own layers, or not known)
    read_weight_bytes: int | None  # read once per drafted token
    shape: Any  # its ModelShape (the KV cache), None when not known
    type_k: str
    type_v: str

    def kv_read_bytes(self, context_tokens: float) -> float | None:
        """The draft KV one drafted token reads at this depth; None when the drafter's shape is not known."""
        if self.shape is None:
            return None
        return kv_mod.kv_bytes_in_use(self.shape, context_tokens, self.type_k, self.type_v)

    def read_bytes(self, context_tokens: float) -> float | None:
        """Bytes one drafted token reads at this depth: the drafter's weights and its KV in use."""
        kv = self.kv_read_bytes(context_tokens)
        if self.read_weight_bytes is None or kv is None:
            return None
        return self.read_weight_bytes + kv


def draft_context(r: ServerReading) -> tuple[DraftContext | None, Notes]:
    """The server's drafter, when its command line (or its log) says it has one; None for n-gram lookup or none."""
    cfg, m = r.config, r.model or ModelInfo()
    type_k = cfg.draft_type_k or DEFAULT_TYPE
    type_v = cfg.draft_type_v or DEFAULT_TYPE
    if cfg.drafter == MTP_LAYERS:
        shape = m.shape.mtp_shape() if isinstance(m.shape, ModelShape) else None
        read = m.mtp_weight_bytes
        unread = {"model.draft": MTP_UNREAD} if read is None or shape is None else {}
        # their weights are the model's own (already in its weights): only their KV cache is memory of the draft's
        return DraftContext(name=MTP_NAME, weight_bytes=None, read_weight_bytes=read, shape=shape, type_k=type_k,
                            type_v=type_v), Notes(reasons=unread)
    if cfg.draft_model_path or m.draft_name:
        return DraftContext(name=m.draft_name or "draft model", weight_bytes=m.draft_weight_bytes,
                            read_weight_bytes=m.draft_weight_bytes, shape=m.draft_shape, type_k=type_k,
                            type_v=type_v), Notes()
    if cfg.draft_kv_bytes_allocated is not None:  # the log names a draft context the command line did not
        why = r.reasons.get("model.draft") or ("the log shows a draft context the command line does not name: its "
                                               "weights and reads are not known")
        return DraftContext(name="draft", weight_bytes=None, read_weight_bytes=None, shape=None, type_k=type_k,
                            type_v=type_v), Notes(reasons={"model.draft": why})
    return None, Notes()


def with_draft(model: ModelView, d: DraftContext | None, r: ServerReading) -> tuple[ModelView, Notes]:
    """The model view with the draft context's memory: its weights, its KV per token and as allocated at load
    (the log's size line, else computed as llama.cpp allocates it: the model's cells and sequences, its types)."""
    if d is None:
        return model, Notes()
    cfg = r.config
    prov: dict[str, Provenance] = {}
    reasons: dict[str, str] = {}
    per_token = alloc = None
    if d.shape is not None:
        per_token = float(kv_mod.kv_bytes_per_token(d.shape, d.type_k, d.type_v).total)
        prov["draft_kv_bytes_per_token"] = Provenance.COMPUTED
    if cfg.draft_kv_bytes_allocated is not None:
        alloc = int(cfg.draft_kv_bytes_allocated)
        prov["draft_kv_allocated_bytes"] = Provenance.LOG
    elif d.shape is not None and model.n_ctx_total:
        # a quantized V cache needs flash attention, which llama.cpp then turns on for the draft context alone
        flash = "on" if cache_type(d.type_v).block_elements > 1 else cfg.flash_attn
        alloc = kv_alloc_bytes(d.shape, model.n_ctx_total, model.n_slots or 1, bool(model.kv_unified), d.type_k,
                                d.type_v, dataclasses.replace(cfg, flash_attn=flash))
        prov["draft_kv_allocated_bytes"] = Provenance.COMPUTED
    else:
        reasons["draft_kv_allocated_bytes"] = ("needs the draft model's shape and the server's total context"
                                               if d.shape is None else "needs the server's total context")
    if d.weight_bytes is not None:
        prov["draft_weight_bytes"] = Provenance.COMPUTED
    types_src = Provenance.COMMAND_LINE if cfg.draft_type_k or cfg.draft_type_v else Provenance.DEFAULT
    prov["draft_kv_type"] = cfg.provenance.get("draft_type_k", types_src)
    return dataclasses.replace(model, draft_name=d.name, draft_weight_bytes=d.weight_bytes,
                               draft_kv_type_k=d.type_k, draft_kv_type_v=d.type_v, draft_kv_bytes_per_token=per_token,
                               draft_kv_allocated_bytes=alloc), Notes(prov, reasons)


def draft_bytes(model: ModelView) -> int | None:
    """What the draft context holds in memory (its weights, its KV cache), or None without one known."""
    parts = [b for b in (model.draft_weight_bytes, model.draft_kv_allocated_bytes) if b]
    return sum(parts) if parts else None
