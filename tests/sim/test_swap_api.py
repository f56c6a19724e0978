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


def test_a_refused_key_is_answered_in_the_form_its_own_request_accepts() -> None:
    with MultiSim(MULTI_SCENARIOS["llama-swap"], faults=["auth:k1"]) as sim:
        assert httpx.get(f"{sim.url}/health", headers={"Accept": "text/plain"}, timeout=10).text == "OK"
        refused = httpx.get(f"{sim.url}/running", headers={"Accept": "application/json"}, timeout=10)
        assert refused.status_code == 401 and refused.headers["WWW-Authenticate"] == 'Basic realm="llama-swap"'
        assert refused.json()["error"]["message"] == "unauthorized: invalid or missing API key"
        as_text = httpx.get(f"{sim.url}/running", headers={"Accept": "text/plain"}, timeout=10)
        assert as_text.status_code == 401 and as_text.text == "llama-swap: unauthorized: invalid or missing API key"
