"""Bits per weight of each model file type, for an estimate of the weights when no file or tensor list gives them.

A GGUF file type is a mix (norms in F32, the output head and some layers in more bits), so its bits per weight are
taken from whole files: the sizes ``llama-quantize`` lists for Llama-3-8B (``tools/quantize/quantize.cpp``,
``QUANT_OPTIONS``: GiB, for 8,030,261,248 parameters), else the bits per weight it states for the type. Float
checkpoints hold their dtype's bits. The estimate is labelled as one wherever it is shown.
"""

from __future__ import annotations

import re

LLAMA3_8B_PARAMS = 8_030_261_248  # the model the sizes below were measured on
# file type → file size in GiB for Llama-3-8B, as llama-quantize lists them
_LLAMA3_8B_GIB = {"Q4_0": 4.34, "Q4_1": 4.78, "Q5_0": 5.21, "Q5_1": 5.65, "Q2_K": 2.96, "Q2_K_S": 2.96,
                  "Q3_K_S": 3.41, "Q3_K_M": 3.74, "Q3_K_L": 4.03, "Q4_K_S": 4.37, "Q4_K_M": 4.58, "Q5_K_S": 5.21,
                  "Q5_K_M": 5.33, "Q6_K": 6.14, "Q8_0": 7.96}
# file type → bits per weight as llama-quantize states them, and the float dtypes
_STATED_BPW = {"Q1_0": 1.125, "Q2_0": 2.25, "IQ2_XXS": 2.06, "IQ2_XS": 2.31, "IQ2_S": 2.5, "IQ2_M": 2.7,
               "IQ1_S": 1.56, "IQ1_M": 1.75, "TQ1_0": 1.69, "TQ2_0": 2.06, "IQ3_XXS": 3.06, "IQ3_S": 3.44,
               "IQ3_M": 3.66, "IQ3_XS": 3.3, "IQ4_NL": 4.5, "IQ4_XS": 4.25, "F16": 16.0, "BF16": 16.0, "F32": 32.0}
# how servers spell them: llama.cpp's ftype names ("Q4_K - Medium"), torch dtypes, aliases
_ALIASES = {"Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M", "Q3_K": "Q3_K_M", "FLOAT16": "F16", "HALF": "F16",
            "BFLOAT16": "BF16", "FLOAT32": "F32", "FLOAT": "F32", "FP16": "F16", "FP32": "F32"}
_SIZE_WORD = {"SMALL": "S", "MEDIUM": "M", "LARGE": "L", "EXTRA SMALL": "XS"}


def file_type_name(quantization: str | None) -> str | None:
    """The canonical name of a file type as servers write it (``Q4_K - Medium`` → ``Q4_K_M``); None if empty."""
    if not quantization or not quantization.strip():
        return None
    q = quantization.strip().upper().removeprefix("TORCH.")
    m = re.fullmatch(r"(\w+?)\s*-\s*(SMALL|MEDIUM|LARGE|EXTRA SMALL)", q)
    if m:
        q = f"{m.group(1)}_{_SIZE_WORD[m.group(2)]}"
    q = q.replace(" ", "_")
    return _ALIASES.get(q, q)


def bits_per_weight(quantization: str | None) -> float | None:
    """Average bits per parameter of a file of this type; None for a type kvmon has no figure for."""
    name = file_type_name(quantization)
    if name is None:
        return None
    if name in _LLAMA3_8B_GIB:
        return _LLAMA3_8B_GIB[name] * 2**30 * 8 / LLAMA3_8B_PARAMS
    return _STATED_BPW.get(name)


def estimated_weight_bytes(n_params: int | None, quantization: str | None) -> tuple[int | None, str]:
    """(bytes, how) of ``n_params`` weights in a file of type ``quantization``; (None, why not) when either is
    unknown."""
    if not n_params or n_params <= 0:
        return None, "the parameter count is unknown"
    bpw = bits_per_weight(quantization)
    if bpw is None:
        what = f"type {quantization}" if quantization else "the quantization is unknown"
        return None, f"no bits-per-weight figure for {what}"
    return int(n_params * bpw / 8), (f"estimated: {n_params / 1e9:.1f}B parameters × {bpw:.2f} bits per weight "
                                     f"({file_type_name(quantization)})")
