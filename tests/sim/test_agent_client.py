"""The demo's coding agent: its system prompt carries the simulated time, so consecutive requests differ where the
clock's seconds are, the place the agent-cache-miss story names."""

from __future__ import annotations

import json
from types import SimpleNamespace

from kvmon.proxy.prompts import PromptLog
from kvmon.sim.agent_client import AgentChat


def _agent_at(seconds: float) -> AgentChat:
    sim = SimpleNamespace(clock=SimpleNamespace(now=lambda: seconds))
    return AgentChat(sim, "http://127.0.0.1:9")


def _request(system: str) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "system", "content": system},
                                                   {"role": "user", "content": "word" * 50}]}).encode()


def test_its_system_prompt_changes_at_the_clocks_seconds_and_the_proxy_names_it_a_timestamp() -> None:
    first, later = _agent_at(30.0)._system(), _agent_at(41.0)._system()
    assert first != later and first.startswith("Current date and time: 2026-03-02 09:14:")
    log = PromptLog(seed=b"test")
    log.compare(_request(first), "m")
    seen = log.compare(_request(later), "m")
    assert seen is not None and seen.divergence is not None
    assert seen.divergence.message_index == 0 and seen.divergence.offset == 40
    assert seen.divergence.sentence == "system message changed at character 40 — looks like a timestamp"


def test_the_same_simulated_second_gives_the_same_prompt_in_every_run() -> None:
    assert _agent_at(125.0)._system() == _agent_at(125.0)._system()
