"""What a model's own multi-token-prediction layers read per drafted token (llama-server ``--spec-type draft-mtp``).

A GGUF with ``<arch>.nextn_predict_layers`` = N > 0 (DeepSeek-V3, GLM-4.5/4.7, Qwen3.5-class, MiMo) carries N MTP
layers after its trunk: blocks ``blk.{block_count-N} … blk.{block_count-1}``, each a transformer block plus its
``nextn.*`` tensors (``eh_proj``, ``enorm``, ``hnorm``, ``shared_head_norm``, optionally ``embed_tokens`` and
``shared_head_head``). Drafting one token runs one MTP layer: its tensors, its routed experts at the share a token
uses, one row of its embedding table (a lookup, not a read of the table), and an output head to pick the token —
the layer's own ``nextn.shared_head_head``, else the model's (``output.weight``, or ``token_embd.weight`` when tied).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

EXPERTS = "_exps."  # routed experts' stacked tensors: a token reads the used ones only
LOOKUP = "nextn.embed_tokens."  # an embedding table: one row per token
OWN_HEAD = "nextn.shared_head_head."


@dataclass(frozen=True)
class MtpRead:
    """Bytes one drafted token reads of the MTP layers, and how they were counted."""

    bytes: int
    layers: int
    estimated: bool  # routed experts scaled by the share a token uses (an estimate, as for the trunk)
    note: str


def mtp_bytes_read(tensor_sizes: Sequence[tuple[str, int]], block_count: int, nextn: int, expert_count: int = 0,
                   expert_used: int = 0) -> MtpRead | None:
    """One drafted token's read of the MTP layers (the mean over them when there are several, each drafted token
    running one), from the GGUF's tensor list; None when the list holds no tensor of those blocks."""
    if not 0 < nextn < block_count:
        return None
    share = expert_used / expert_count if expert_count > 1 and 0 < expert_used <= expert_count else 1.0
    by_name = dict(tensor_sizes)
    shared_head = by_name.get("output.weight") or by_name.get("token_embd.weight")
    per_layer: list[float] = []
    estimated = False
    for il in range(block_count - nextn, block_count):
        prefix = f"blk.{il}."
        block = [(n, b) for n, b in tensor_sizes if n.startswith(prefix)]
        if not block:
            continue
        read = 0.0
        own_head = False
        for name, nbytes in block:
            if LOOKUP in name:
                continue
            if EXPERTS in name and share < 1.0:
                read += nbytes * share
                estimated = True
                continue
            own_head = own_head or OWN_HEAD in name
            read += nbytes
        if not own_head:
            if shared_head is None:
                return None  # no head to pick the token with: not a drafter kvmon can size
            read += shared_head
        per_layer.append(read)
    if not per_layer:
        return None
    mean = sum(per_layer) / len(per_layer)
    note = (f"{len(per_layer)} MTP layer(s) of the model (nextn_predict_layers = {nextn}): one per drafted token, with "
            "the output head it picks its token with" + (", routed experts at the share a token uses" if estimated
                                                         else ""))
    return MtpRead(bytes=round(mean), layers=len(per_layer), estimated=estimated, note=note)
