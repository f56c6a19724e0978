"""Quantization types: the bits per weight of a file type, named."""

from __future__ import annotations

import pytest

from kvmon.physics.quant import bits_per_weight, estimated_weight_bytes, file_type_name

GIB = 1024**3


def test_bits_per_weight_estimate_names_its_type() -> None:
    assert file_type_name("Q4_K - Medium") == "Q4_K_M" and file_type_name("bfloat16") == "BF16"
    assert bits_per_weight("Q4_K_M") == pytest.approx(4.90, abs=0.01) and bits_per_weight("BF16") == 16.0
    est, how = estimated_weight_bytes(8_030_261_248, "Q4_K_M")
    assert est == pytest.approx(4.58 * GIB, rel=1e-3) and "Q4_K_M" in how and how.startswith("estimated")
    assert estimated_weight_bytes(None, "Q4_K_M") == (None, "the parameter count is unknown")
    assert estimated_weight_bytes(10**9, "weird")[0] is None
