"""Every way a server can hang (``hostile_matrix.MODES``) on every endpoint of every backend kvmon reads, against
``kvmon once`` over real sockets: whatever hangs, ``once`` ends within 2 × timeout + interval + 1 s and never with a
traceback. An endpoint off the backend's own reading that hangs costs its value only (exit 0, the endpoint named
in a reason); one the reading cannot do without ends in a timeout that names it. ``bench/hostile_matrix.py`` runs
the same cases at the default timeout and prints the slowest per endpoint.
"""

from __future__ import annotations

import json

import pytest
from hostile_matrix import BACKENDS, MODES, CaseResult, _split, bound_s, cases, run_cases

TIMEOUT_S, INTERVAL_S = 1.0, 0.2

# Without these there is no reading at all: the model list (Ollama's /api/ps, a router's /models), vLLM's one page,
# and a router model's /props (which says whether asking its /slots would wake it).
ESSENTIAL = {("router", "/models"), ("router", "/props?model"), ("ollama", "/api/ps"), ("vllm", "/metrics")}
# Asked while kvmon tells which server answers, before the one that decides: a hang there leaves the backend to the
# URL's port (these cases run on random ports), so only the bound and the clean ending are asserted. A router's own
# /props says it is a router: dropped mid-answer, the router is read as the llama-server it looks like.
DETECTION = {("llama-swap", "/running"), ("ollama", "/api/version"), ("vllm", "/version"),
             ("lmstudio", "/api/v1/models"), ("lmstudio", "/api/v0/models"), ("router", "/props")}
# The default kvmon proxy is optional: a refused connection means none runs, and is not said. A connection it
# closes mid-answer reaches the source as the same failure, so it is read as no proxy too (the reading comes).
OPTIONAL = {("ollama", "proxy /kvmon/stats"), ("lmstudio", "proxy /kvmon/stats")}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def matrix() -> list[CaseResult]:
    return run_cases(list(cases()), timeout_s=TIMEOUT_S, interval_s=INTERVAL_S)


def _table(rows: list[CaseResult]) -> str:
    return "\n".join(f"{r.elapsed_s:5.2f} s rc={r.rc} {r.backend} {r.endpoint} {r.mode}: {r.first_line}" for r in rows)


def test_the_matrix_covers_every_mode_on_every_endpoint_of_every_backend(matrix: list[CaseResult]) -> None:
    assert {r.backend for r in matrix} == set(BACKENDS) >= {"llama-server", "router", "llama-swap", "ollama", "vllm",
                                                              "lmstudio", "remote-devices"}
    assert len(matrix) == sum(len(b.endpoints) for b in BACKENDS.values()) * len(MODES) >= 120


def test_no_case_outlives_two_timeouts_the_interval_and_a_second(matrix: list[CaseResult]) -> None:
    late = [r for r in matrix if r.elapsed_s > bound_s(TIMEOUT_S, INTERVAL_S)]
    assert not late, f"over {bound_s(TIMEOUT_S, INTERVAL_S):.1f} s:\n{_table(late)}"


def test_no_case_ends_in_a_traceback_or_an_odd_exit_status(matrix: list[CaseResult]) -> None:
    bad = [r for r in matrix if r.error is not None or r.rc not in (0, 2) or "Traceback" in r.stderr]
    assert not bad, _table(bad) + "\n" + "\n".join(r.error or "" for r in bad)[:4000]


def test_a_hang_off_the_main_reading_costs_only_its_own_values(matrix: list[CaseResult]) -> None:
    """One endpoint hanging (not the whole server): the reading comes, its values unknown with the reason."""
    wrong = []
    for r in matrix:
        key = (r.backend, r.endpoint)
        if key in ESSENTIAL or key in DETECTION or (r.mode == "accept_stall" and _split(r.endpoint)[0] in ("",
                                                                                                          "upstream")):
            continue
        path = _split(r.endpoint)[1].split("?")[0]
        said = path in json.dumps(r.doc) or (key in OPTIONAL and r.mode == "drop_mid_answer")
        if r.rc != 0 or r.doc is None or not said:
            wrong.append(r)
    assert not wrong, _table(wrong)


def test_a_hang_the_reading_cannot_do_without_is_a_timeout_that_says_where(matrix: list[CaseResult]) -> None:
    wrong = [r for r in matrix if (r.backend, r.endpoint) in ESSENTIAL and r.mode != "accept_stall"
             and not (r.rc == 2 and _split(r.endpoint)[1].split("?")[0] in r.stderr
                      and ("in time" in r.stderr or r.mode == "drop_mid_answer"))]
    assert not wrong, _table(wrong)


def test_a_wedged_server_is_a_timeout_not_a_reading_of_nothing(matrix: list[CaseResult]) -> None:
    """Accepted and never answered from some request on: no "connected" with every value unknown."""
    wrong = [r for r in matrix if r.mode == "accept_stall" and _split(r.endpoint)[0] in ("", "upstream")
             and not (r.rc == 2 and ("in time" in r.stderr or "not asked" in r.stderr))]
    assert not wrong, _table(wrong)
