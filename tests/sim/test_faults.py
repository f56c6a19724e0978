"""Faults injected into the simulator: their syntax, and the typed failure each gives through the sources."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from kvmon.core.readings import FailureKind, SourceError
from kvmon.sim.faults import Fault, FaultPlan, FaultSyntaxError, parse_fault, parse_faults
from kvmon.sim.server import SimServer

llamacpp = pytest.importorskip("kvmon.sources.llamacpp.source")


# -- syntax -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("restart@30", Fault("restart", 30.0, duration_s=2.0)),
        ("restart:8@30", Fault("restart", 30.0, duration_s=8.0)),
        ("hang:10", Fault("hang", 0.0, duration_s=10.0)),
        ("hang:2.5@60", Fault("hang", 60.0, duration_s=2.5)),
        ("loading:5@1", Fault("loading", 1.0, duration_s=5.0)),
        ("auth", Fault("auth", 0.0, api_key="sim-key")),
        ("auth:s3cret", Fault("auth", 0.0, api_key="s3cret")),
        ("garbage", Fault("garbage", 0.0)),
        ("garbage:4@2", Fault("garbage", 2.0, duration_s=4.0)),
        ("drip", Fault("drip", 0.0, drip_bytes_per_s=20.0)),
        (" DRIP:500@3 ", Fault("drip", 3.0, drip_bytes_per_s=500.0)),
    ],
)
def test_fault_syntax(spec: str, want: Fault) -> None:
    assert parse_fault(spec) == want


@pytest.mark.parametrize("spec", ["", "explode", "hang", "hang:x", "hang:5@soon", "loading:-1", "drip:0", "restart@-3"])
def test_bad_fault_syntax_is_a_typed_error(spec: str) -> None:
    with pytest.raises(FaultSyntaxError):
        parse_fault(spec)


def test_fault_windows() -> None:
    plan = FaultPlan(parse_faults(["hang:5@10", "loading:2@20", "garbage:1@30", "auth:k@40", "drip:50@50"]))
    assert plan.hang_until(9.9) is None and plan.hang_until(10) == 15 and plan.hang_until(15) is None
    assert not plan.loading(19.9) and plan.loading(21) and not plan.loading(22)
    assert plan.garbage(30.5) and not plan.garbage(31)
    assert plan.api_key(39) is None and plan.api_key(41) == "k"
    assert plan.drip_bytes_per_s(49) is None and plan.drip_bytes_per_s(1e6) == 50


def test_bad_fault_or_scenario_fails_at_construction() -> None:
    with pytest.raises(FaultSyntaxError):
        SimServer("seed-3090x2", faults=["hang"])
    with pytest.raises(ValueError, match="unknown scenario"):
        SimServer("no-such-scenario")


# -- through the llama-server source ------------------------------------------------------------------
def _source(sim: SimServer, **kw: object) -> object:
    return llamacpp.LlamaServerSource(sim.url, timeout_s=kw.pop("timeout_s", 2.0), log_path=sim.log_path,
                                      **kw)  # type: ignore[arg-type]


def _kind(src: object) -> FailureKind | None:
    try:
        src.poll()  # type: ignore[attr-defined]
    except SourceError as e:
        return e.failure.kind
    return None


def test_restart_resets_counters_and_answers_loading_meanwhile() -> None:
    with SimServer("seed-3090x2", speed=1.0, faults=["restart:20@100"]) as sim:
        src = _source(sim)
        try:
            sim.clock.advance(95)
            before = src.poll()  # type: ignore[attr-defined]
            assert before.metrics["tokens_predicted_total"] > 0
            sim.clock.advance(10)  # t = 105: the new process is loading
            assert _kind(src) is FailureKind.MODEL_LOADING
            sim.clock.advance(20)  # t = 125: up again, a fresh process
            after = src.poll()  # type: ignore[attr-defined]
        finally:
            src.close()  # type: ignore[attr-defined]
    assert after.metrics["tokens_predicted_total"] < before.metrics["tokens_predicted_total"]
    assert after.metrics["n_decode_total"] < before.metrics["n_decode_total"]


def test_loading_window_then_ready() -> None:
    with SimServer("seed-3090x2", speed=1.0, faults=["loading:30"]) as sim:
        src = _source(sim)
        try:
            assert _kind(src) is FailureKind.MODEL_LOADING
            sim.clock.advance(31)
            assert _kind(src) is None
        finally:
            src.close()  # type: ignore[attr-defined]


def test_hang_times_out_then_recovers() -> None:
    with SimServer("seed-3090x2", speed=1.0, faults=["hang:60@5"]) as sim:
        src = _source(sim, timeout_s=0.3)
        try:
            sim.clock.advance(6)
            t0 = time.monotonic()
            assert _kind(src) is FailureKind.TIMEOUT
            assert time.monotonic() - t0 < 2.0
            sim.clock.advance(60)
            assert _kind(src) is None
        finally:
            src.close()  # type: ignore[attr-defined]


def test_api_key_required() -> None:
    with SimServer("seed-3090x2", speed=1.0, faults=["auth:k1"]) as sim:
        no_key, good = _source(sim), _source(sim, api_key="k1")
        try:
            assert _kind(no_key) is FailureKind.AUTH_REJECTED
            assert _kind(good) is None
            assert httpx.get(sim.url + "/health").status_code == 200  # /health stays public
            r = httpx.get(sim.url + "/props", headers={"X-Api-Key": "k1"})
            assert r.status_code == 200
            r = httpx.get(sim.url + "/slots")
            assert r.status_code == 401 and r.headers["connection"] == "close"
        finally:
            no_key.close()  # type: ignore[attr-defined]
            good.close()  # type: ignore[attr-defined]


def test_garbage_bodies_give_reasons_not_crashes() -> None:
    with SimServer("seed-3090x2", speed=1.0, faults=["garbage"]) as sim:
        src = _source(sim)
        try:
            try:
                r = src.poll()  # type: ignore[attr-defined]
            except SourceError as e:
                assert e.failure.kind is FailureKind.UNEXPECTED_BODY
            else:
                assert "did not return JSON" in r.reasons["props"]
                assert "metrics" in r.reasons
        finally:
            src.close()  # type: ignore[attr-defined]


def test_slow_drip_ends_in_a_timeout_not_a_stuck_poll() -> None:
    outcome: list[object] = []
    with SimServer("seed-3090x2", speed=1.0, faults=["drip:40"]) as sim:
        src = _source(sim, timeout_s=0.5)

        def poll() -> None:
            try:
                outcome.append(src.poll())  # type: ignore[attr-defined]
            except SourceError as e:
                outcome.append(e.failure.kind)

        t = threading.Thread(target=poll, daemon=True)
        t.start()
        t.join(3.0)
        stuck = t.is_alive()
    t.join(2.0)
    src.close()  # type: ignore[attr-defined]
    assert not stuck, "poll still waiting after 3 s with a 0.5 s timeout"
    assert len(outcome) == 1
    result = outcome[0]
    if isinstance(result, FailureKind):
        assert result is FailureKind.TIMEOUT
    else:  # small bodies may trickle in within the deadline: the rest is partial, each with its reason
        reasons = " | ".join(result.reasons.values())  # type: ignore[attr-defined]
        assert "did not answer in time" in reasons, reasons


# -- through the Ollama source ------------------------------------------------------------------------
@pytest.mark.parametrize(("fault", "kind"), [("auth", FailureKind.AUTH_REJECTED), ("hang:30", FailureKind.TIMEOUT),
                                             ("garbage", FailureKind.UNEXPECTED_BODY)])
def test_ollama_faults(fault: str, kind: FailureKind) -> None:
    ollama = pytest.importorskip("kvmon.sources.ollama.source")
    with SimServer("ollama-partial", speed=1.0, faults=[fault]) as sim:
        src = ollama.OllamaSource(sim.url, timeout_s=0.3, find_child=False)
        try:
            with pytest.raises(SourceError) as e:
                src.poll()
        finally:
            src.close()
    assert e.value.failure.kind is kind
