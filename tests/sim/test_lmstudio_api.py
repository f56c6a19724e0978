"""The simulated LM Studio lists its models as the documented REST API does: kvmon reads a loaded model's instance
(its context, batch, parallel requests, flash attention) from /api/v1/models, and the model from /api/v0/models."""

from __future__ import annotations

import httpx

from kvmon.sim.server import SimServer
from kvmon.sources.lmstudio.parse import parse_v0, parse_v1


def test_the_v1_list_gives_the_loaded_models_instance_settings() -> None:
    with SimServer("lmstudio") as sim:
        models, problems = parse_v1(httpx.get(f"{sim.url}/api/v1/models", timeout=10).json())
    assert problems == []
    (llm,) = [m for m in models if m.type == "llm"]
    assert llm.loaded and llm.arch == "gemma3" and llm.quantization == "Q4_K_M"
    (inst,) = llm.instances
    assert (inst.context_length, inst.eval_batch_size, inst.parallel, inst.flash_attention) == (16384, 512, 1, True)
    assert llm.size_bytes == 7_294_226_304  # the simulated file: the published Q4_K_M size to 0.1%


def test_the_v0_list_names_the_loaded_model_as_older_lm_studio_does() -> None:
    with SimServer("lmstudio") as sim:
        models, problems = parse_v0(httpx.get(f"{sim.url}/api/v0/models", timeout=10).json())
    assert problems == []
    (llm,) = models
    assert (llm.key, llm.loaded, llm.max_context_length) == ("google/gemma-3-12b", True, 131072)
