"""The tensors a dense transformer's checkpoint holds: their GGUF names and shapes, from the model's GGUF keys.

Shapes are in GGUF's order (the innermost dimension first: a projection from width d to width n is ``[d, n]``), as
llama.cpp's ``llama-model.cpp`` creates them and ``convert_hf_to_gguf.py`` writes them, so that the element count of
every tensor, and so the parameter count, is the checkpoint's own. Covered: ``llama`` (and Mistral, written as
llama), ``qwen2`` (q/k/v biases), ``qwen3`` (per-head q/k norms), ``gemma2`` and ``gemma3`` (norms after attention
and the FFN; the output head is the token embedding, tied), ``phi3`` (fused qkv and gate/up). Other architectures
give None: their inventory is not guessed. A model whose output head reuses the token embedding has no
``output.weight`` (``general.tied_embeddings`` is not a GGUF key: the architecture decides, except where a key says).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# architectures whose output head is the token-embedding matrix (llama.cpp loads output.weight as optional and
# falls back to token_embd)
_TIED = frozenset({"gemma", "gemma2", "gemma3"})
_COVERED = frozenset({"llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"})


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of the checkpoint: its GGUF name, its shape (innermost first) and the layer it belongs to."""

    name: str
    shape: tuple[int, ...]
    layer: int | None = None  # None: outside the repeating blocks (embeddings, final norm, output head)

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)


def _int(md: Mapping[str, Any], key: str) -> int | None:
    v = md.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def tensor_inventory(metadata: Mapping[str, Any], *, tied: bool | None = None) -> tuple[TensorSpec, ...] | None:
    """Every tensor of a dense model of a covered architecture, in GGUF order; None when not covered or keys lack.

    ``tied``: whether the output head is the token embedding (None: the architecture's usual choice).
    """
    arch = metadata.get("general.architecture")
    if arch not in _COVERED:
        return None
    a = str(arch)
    n_layers = _int(metadata, f"{a}.block_count")
    d = _int(metadata, f"{a}.embedding_length")
    n_head = _int(metadata, f"{a}.attention.head_count")
    ff = _int(metadata, f"{a}.feed_forward_length")
    vocab = _int(metadata, f"{a}.vocab_size")
    if not (n_layers and d and n_head and ff and vocab):
        return None
    n_kv = _int(metadata, f"{a}.attention.head_count_kv") or n_head
    k_len = _int(metadata, f"{a}.attention.key_length") or d // n_head
    v_len = _int(metadata, f"{a}.attention.value_length") or k_len
    q_w, k_w, v_w = n_head * k_len, n_kv * k_len, n_kv * v_len
    out: list[TensorSpec] = [TensorSpec("token_embd.weight", (d, vocab))]
    for i in range(n_layers):
        p = f"blk.{i}."
        layer: list[tuple[str, tuple[int, ...]]] = [("attn_norm.weight", (d,))]
        if a == "phi3":
            layer.append(("attn_qkv.weight", (d, q_w + k_w + v_w)))
        else:
            layer += [("attn_q.weight", (d, q_w)), ("attn_k.weight", (d, k_w)), ("attn_v.weight", (d, v_w))]
        if a == "qwen2":
            layer += [("attn_q.bias", (q_w,)), ("attn_k.bias", (k_w,)), ("attn_v.bias", (v_w,))]
        if a in ("qwen3", "gemma3"):
            layer += [("attn_q_norm.weight", (k_len,)), ("attn_k_norm.weight", (k_len,))]
        layer.append(("attn_output.weight", (q_w, d)))
        if a in ("gemma2", "gemma3"):
            layer.append(("post_attention_norm.weight", (d,)))
        layer.append(("ffn_norm.weight", (d,)))
        if a == "phi3":
            layer.append(("ffn_up.weight", (d, 2 * ff)))
        else:
            layer += [("ffn_gate.weight", (d, ff)), ("ffn_up.weight", (d, ff))]
        layer.append(("ffn_down.weight", (ff, d)))
        if a in ("gemma2", "gemma3"):
            layer.append(("post_ffw_norm.weight", (d,)))
        out += [TensorSpec(p + name, shape, i) for name, shape in layer]
    out.append(TensorSpec("output_norm.weight", (d,)))
    if not (a in _TIED if tied is None else tied):
        out.append(TensorSpec("output.weight", (d, vocab)))
    return tuple(out)


def parameter_count(metadata: Mapping[str, Any], *, tied: bool | None = None) -> int | None:
    """The model's parameters: ``general.parameter_count`` when the file says, else the inventory's elements."""
    given = _int(metadata, "general.parameter_count")
    if given is not None:
        return given
    inv = tensor_inventory(metadata, tied=tied)
    return sum(t.n_elements for t in inv) if inv is not None else None
