"""The simulated model files' tensor types: each tensor's type as ``llama-quantize`` picks it for a file type.

The rules are llama.cpp's ``llama_tensor_get_type`` (``src/llama-quant.cpp``) for the file types the scenarios use:
1-D tensors (norms, biases) stay F32; the output head (or the token embedding when the head is tied to it) is Q6_K;
Q4_K_M gives ``attn_v`` and ``ffn_down`` Q6_K on the layers ``use_more_bits`` picks (the first and last eighth and
every third between) and Q4_K elsewhere, a 70B model's ``attn_v`` at least Q5_K, fused ``attn_qkv`` Q5_K; a row
whose length is not a multiple of the type's block falls back (Q4_K→Q5_0, Q6_K→Q8_0, output→Q8_0). F16, BF16 and
F32 files keep every matrix in that type. Sizes per type come from the ``gguf`` package (``GGML_QUANT_SIZES``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from kvmon.physics.tensors import TensorSpec

Q = GGMLQuantizationType
# the file types the simulator writes → the type of their ordinary matrices
_BASE = {"Q4_K_M": Q.Q4_K, "Q8_0": Q.Q8_0, "F16": Q.F16, "BF16": Q.BF16, "F32": Q.F32}
_FALLBACK = {Q.Q4_K: Q.Q5_0, Q.Q5_K: Q.Q5_1, Q.Q6_K: Q.Q8_0}


@dataclass(frozen=True)
class TypedTensor:
    """A tensor of the file: name, shape (innermost first), GGML type and its size in bytes."""

    name: str
    shape: tuple[int, ...]
    ggml_type: GGMLQuantizationType
    layer: int | None = None

    @property
    def n_bytes(self) -> int:
        block, size = GGML_QUANT_SIZES[self.ggml_type]
        return math.prod(self.shape) // block * size


def _more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _fits(t: GGMLQuantizationType, row: int) -> GGMLQuantizationType:
    block = GGML_QUANT_SIZES[t][0]
    if row % block == 0:
        return t
    fb = _FALLBACK.get(t, Q.F16)
    return fb if row % GGML_QUANT_SIZES[fb][0] == 0 else Q.F16


def _pick(spec: TensorSpec, ftype: str, n_layers: int, tied: bool, is_70b: bool) -> GGMLQuantizationType:
    base = _BASE[ftype]
    if len(spec.shape) < 2 or "_norm" in spec.name or not spec.name.endswith("weight"):
        return Q.F32
    if base in (Q.F16, Q.BF16, Q.F32):
        return base
    row = spec.shape[0]
    head = spec.name == "output.weight" or (tied and spec.name == "token_embd.weight")
    if head:
        if row % GGML_QUANT_SIZES[base][0] != 0:
            return Q.Q8_0
        return Q.Q6_K if base != Q.Q8_0 else Q.Q8_0
    t = base
    if ftype == "Q4_K_M" and spec.layer is not None:
        if spec.name.endswith("attn_v.weight"):
            t = Q.Q6_K if _more_bits(spec.layer, n_layers) else Q.Q4_K
            if is_70b and t == Q.Q4_K:
                t = Q.Q5_K
        elif spec.name.endswith("ffn_down.weight") and _more_bits(spec.layer, n_layers):
            t = Q.Q6_K
        elif spec.name.endswith("attn_qkv.weight"):
            t = Q.Q5_K
    return _fits(t, row)


def quantize(inventory: Sequence[TensorSpec], ftype: str, metadata: Mapping[str, Any]) -> tuple[TypedTensor, ...]:
    """The inventory with each tensor's type as ``llama-quantize --<ftype>`` gives it; ValueError for a file type
    the simulator does not write."""
    if ftype not in _BASE:
        raise ValueError(f"the simulator writes no {ftype} files (known: {', '.join(_BASE)})")
    arch = str(metadata.get("general.architecture"))
    n_layers = int(metadata.get(f"{arch}.block_count") or 0)
    tied = not any(s.name == "output.weight" for s in inventory)
    n_head = metadata.get(f"{arch}.attention.head_count")
    # llama.cpp's LLM_TYPE_70B: 80 blocks with grouped KV heads (equal head counts are the 65B)
    is_70b = n_layers == 80 and n_head != metadata.get(f"{arch}.attention.head_count_kv", n_head)
    return tuple(TypedTensor(s.name, s.shape, _pick(s, ftype, n_layers, tied, is_70b), s.layer) for s in inventory)
