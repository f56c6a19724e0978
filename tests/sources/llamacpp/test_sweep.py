"""llama-server swept at every depth: token arrays on its free slot, timed by the server, each row the simulated
server's own speed."""

from __future__ import annotations

from typing import Any

import pytest
from sweep_sim import _monitor, _physics, _sweep


def test_llama_server_sweeps_with_token_arrays_on_its_free_slot(single: Any) -> None:
    sim = single("seed-3090x2")
    result = _sweep(_monitor(sim), 8192)
    for row in result.rows:
        assert row.timing == "server"
        assert row.decode_tok_s == pytest.approx(_physics(sim, row.depth_tokens + 8), rel=0.06)
    assert result.prompt_tokens_read is not None and result.prompt_tokens_read <= 1.2 * result.depth_reached
