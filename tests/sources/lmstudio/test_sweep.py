"""LM Studio swept through its REST chat's stats."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from sweep_sim import QUIET, _monitor, _physics, _sweep

from kvmon.sim.scenarios import get_scenario


def test_lm_studio_sweeps_through_its_rest_chat_stats(single: Any) -> None:
    sim = single(replace(get_scenario("lmstudio"), script=QUIET))
    result = _sweep(_monitor(sim), 4096)
    for row in result.rows:
        assert row.decode_tok_s == pytest.approx(_physics(sim, row.depth_tokens + 8), rel=0.06)
