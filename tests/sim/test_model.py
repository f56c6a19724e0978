"""The simulated model files: their sizes are what llama-quantize lists."""

from __future__ import annotations

import dataclasses

import pytest

from kvmon.physics.presets import PRESETS
from kvmon.sim.model import LoadedModel, SimSetupError, model_tensors
from kvmon.sim.scenarios import GIB, get_scenario


@pytest.mark.parametrize(("ftype", "gib"), [("Q4_K_M", 4.58), ("Q8_0", 7.96), ("F16", 14.96)])
def test_file_sizes_are_what_llama_quantize_lists_for_llama3_8b(ftype: str, gib: float) -> None:
    """tools/quantize/quantize.cpp QUANT_OPTIONS: Q4_K_M 4.58G, Q8_0 7.96G @ Llama-3-8B; F16 14.96 GB (the file
    XiongjieDai/GPU-Benchmarks-on-LLM-Inference lists). The files add a tokenizer's few MB to the tensors."""
    tensors = model_tensors(PRESETS["llama-3.1-8b"].metadata, ftype)
    assert tensors is not None
    assert sum(t.n_bytes for t in tensors) / GIB == pytest.approx(gib, rel=0.005)


def test_unknown_preset_or_gpu_is_a_setup_error() -> None:
    s = get_scenario("spill-4090")
    with pytest.raises(SimSetupError, match="presets"):
        LoadedModel(dataclasses.replace(s, preset_keys=("no-such-model",)), 4096)
    with pytest.raises(SimSetupError, match="GPU"):
        LoadedModel(dataclasses.replace(s, gpu_name="Voodoo 2"), 4096)
