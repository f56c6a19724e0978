"""vLLM swept with token ids to /v1/completions, each depth timed by the stream."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from sweep_sim import QUIET, _monitor, _physics, _sweep

from kvmon.sim.scenarios import get_scenario


def test_vllm_sweeps_token_ids_timed_by_the_stream(single: Any) -> None:
    sim = single(replace(get_scenario("vllm"), script=QUIET), speed=1.0)  # the stream is timed in real seconds
    result = _sweep(_monitor(sim), 4096, steps=2, generate=64)
    for row in result.rows:  # timed over ~1.2 s of tokens: a busy machine's scheduling costs a few percent
        assert row.timing == "stream"
        assert row.decode_tok_s == pytest.approx(_physics(sim, row.depth_tokens + 32), rel=0.15)
