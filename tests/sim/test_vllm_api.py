"""The simulated vLLM answers as the real one does: kvmon's parser reads the same fields from its /metrics page as
from a captured vLLM page, and its model list as vLLM's."""

from __future__ import annotations

import dataclasses

import httpx
from repo_paths import FIXTURES

from kvmon.sim.server import SimServer
from kvmon.sources.vllm.parse import parse_metrics, parse_models


def _known(obj: object) -> set[str]:
    return {f.name for f in dataclasses.fields(obj) if getattr(obj, f.name) not in (None, {}, (), [])}  # type: ignore[arg-type]


def test_the_metrics_page_gives_kvmon_what_a_real_vllm_page_gives() -> None:
    real = parse_metrics((FIXTURES / "vllm" / "metrics.v1.txt").read_text())
    with SimServer("vllm") as sim:
        simulated = parse_metrics(httpx.get(f"{sim.url}/metrics", timeout=10).text)
    assert _known(simulated) == _known(real)


def test_the_model_list_names_the_served_model_with_its_context() -> None:
    with SimServer("vllm") as sim:
        cards, skipped = parse_models(httpx.get(f"{sim.url}/v1/models", timeout=10).json())
    assert skipped == []
    (card,) = cards
    assert card.id == "Qwen/Qwen3-8B"
    assert card.max_model_len == 32768
