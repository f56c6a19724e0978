"""The simulated llama-swap answers /v1/models and /running as llama-swap does: every configured model listed with
its process state, none started until a request asks for it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from kvmon.sim.multi import MultiSim
from kvmon.sim.multi_scenarios import MULTI_SCENARIOS
from kvmon.sources.llama_swap.source import parse_listing


@pytest.fixture
def swap() -> Iterator[MultiSim]:
    sim = MultiSim(MULTI_SCENARIOS["llama-swap"])
    sim.start()
    sim.clock.pause()
    try:
        yield sim
    finally:
        sim.stop()


def test_every_configured_model_is_listed_and_none_is_running_at_start(swap: MultiSim) -> None:
    models, notes = parse_listing(httpx.get(f"{swap.url}/v1/models", timeout=10).json(),
                                  httpx.get(f"{swap.url}/running", timeout=10).json())
    assert notes == []
    assert sorted(m.name for m in models) == ["gemma-3-12b", "gpt-oss-20b", "qwen3-8b"]
    assert {m.status for m in models} == {"unloaded"}
