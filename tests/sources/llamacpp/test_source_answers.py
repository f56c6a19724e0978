"""llama-server's health comes from its answers: one endpoint dropping its answer mid-body (the server died while
answering, a proxy cut it) costs only that endpoint's values, whichever it is; ``once`` still reads the rest
(``/health`` or ``/props`` dropped used to end ``once`` with exit 2 and lose the whole reading)."""

from __future__ import annotations

import pytest
from hostile_matrix import no_proxy, run_case


@pytest.mark.parametrize("endpoint", ["/health", "/props", "/slots", "/metrics"])
def test_one_endpoint_dropped_mid_answer_costs_only_its_own_values(endpoint: str) -> None:
    with no_proxy():
        r = run_case("llama-server", endpoint, "drop_mid_answer", timeout_s=1.0, interval_s=0.2)
    assert r.error is None and r.rc == 0, r.stderr
    assert r.doc is not None and r.doc["backend"] == "llama-server"
    if endpoint != "/props":
        assert r.doc["model"]["name"]  # /props (and the model) read
    if endpoint != "/slots":
        assert r.doc["context_tokens"] is not None or endpoint == "/props"
