"""Every demo scenario loads and fits its story."""

from __future__ import annotations

import pytest

from kvmon.sim.model import LoadedModel
from kvmon.sim.scenarios import SCENARIOS, get_scenario


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_loads_and_fits_its_story(name: str) -> None:
    s = get_scenario(name)
    m = LoadedModel(s, s.n_ctx)
    assert m.decode_tok_s(0) > m.decode_tok_s(s.n_ctx // 2) > 0
    for i in range(s.n_gpus):
        assert m.server_vram_bytes(i) <= m.gpu.vram_bytes
    assert m.partial_offload is (name == "ollama-partial")
