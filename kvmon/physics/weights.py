"""Weight bytes one decode step reads: all of a dense model; for a MoE, the shared part plus the routed experts.

The MoE figure is an estimate (routing varies per token) and is labelled as one.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvmon.physics.layers import AttentionKind
from kvmon.physics.shape import ModelShape


@dataclass(frozen=True)
class WeightRead:
    """Weight bytes read per generated token, whether that is an estimate, and how it was obtained."""

    bytes: float
    estimated: bool
    note: str


def _param_split(shape: ModelShape) -> tuple[float, float] | None:
    """(parameters outside the routed experts, parameters in all routed experts), from the shape's sizes."""
    ff_exp = shape.expert_feed_forward_length or shape.feed_forward_length
    if not ff_exp or not shape.n_embd:
        return None
    d = shape.n_embd
    moe_layers = max(0, shape.n_layers - shape.leading_dense_block_count)
    expert = moe_layers * shape.expert_count * 3 * d * ff_exp  # gate, up, down per expert
    shared = moe_layers * shape.expert_shared_count * 3 * d * ff_exp
    dense_ff = shape.feed_forward_length if shape.feed_forward_length else ff_exp
    shared += shape.leading_dense_block_count * 3 * d * dense_ff
    for layer in shape.layers:  # attention projections, roughly q, k, v, o
        if layer.kind is AttentionKind.MLA and shape.key_length_mla and shape.value_length_mla:
            q_o = shape.n_head * (shape.key_length_mla + shape.value_length_mla)
        else:
            head_dim = layer.key_length or (d // shape.n_head if shape.n_head else 0)
            q_o = 2 * shape.n_head * head_dim
        kv = layer.n_head_kv * (layer.key_length + layer.value_length)
        shared += d * (q_o + kv)
    if shape.vocab_size:
        shared += 2 * shape.vocab_size * d  # token embeddings and output head
    return float(shared), float(expert)


def weight_bytes_read_per_token(
    shape: ModelShape,
    weight_bytes: float,
    *,
    expert_weight_bytes: float | None = None,
    embedding_bytes: float | None = None,
) -> WeightRead:
    """Bytes of weights one generated token reads.

    Dense: all of ``weight_bytes``. MoE: the non-expert part plus the expert part × used/total experts, where
    the expert part is ``expert_weight_bytes`` when known (from the GGUF tensor list) or else estimated from
    the shape's parameter counts. ``embedding_bytes``: the token-embedding table when the output head does
    not reuse it (untied); a token reads one row of it, so it is left out.
    """
    if weight_bytes < 0:
        raise ValueError(f"negative weight bytes {weight_bytes}")
    if embedding_bytes is not None and 0 < embedding_bytes < weight_bytes:
        weight_bytes -= embedding_bytes
        embedding_note = "; the token-embedding table (one row read per token) left out"
    else:
        embedding_note = ""
    if not shape.is_moe:
        return WeightRead(float(weight_bytes), False,
                          "dense model: every weight is read for each token" + embedding_note)
    used_fraction = shape.expert_used_count / shape.expert_count
    if expert_weight_bytes is not None and 0 <= expert_weight_bytes <= weight_bytes:
        read = (weight_bytes - expert_weight_bytes) + expert_weight_bytes * used_fraction
        return WeightRead(
            read, True,
            f"MoE: shared weights + {shape.expert_used_count}/{shape.expert_count} of the expert tensors "
            "(an average: routing varies per token)" + embedding_note,
        )
    split = _param_split(shape)
    if split is None:
        return WeightRead(
            float(weight_bytes), True,
            "MoE without expert sizes in the metadata: all weights counted (an upper bound)" + embedding_note,
        )
    shared, expert = split
    expert_share = expert / (shared + expert)
    read = weight_bytes * ((1.0 - expert_share) + expert_share * used_fraction)
    return WeightRead(
        read, True,
        f"MoE estimate: experts ≈ {expert_share:.0%} of the parameters, {shape.expert_used_count}/"
        f"{shape.expert_count} used per token (routing varies per token)" + embedding_note,
    )
