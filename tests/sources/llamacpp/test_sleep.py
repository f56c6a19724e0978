"""Letting a llama-server started with --sleep-idle-seconds fall asleep: once every slot has been idle a few seconds
/slots (which restarts the server's idle timer) is not asked, until a request shows on /metrics, or, without
/metrics, until the server should have fallen asleep; the reason says which."""

from __future__ import annotations

from kvmon.sources.llamacpp.sleep import QUIET_AFTER_S, SleepCourtesy

IDLE = {"n_decode_total": 40.0, "prompt_tokens_total": 900.0, "tokens_predicted_total": 400.0}
ONE_MORE_REQUEST = {**IDLE, "n_decode_total": 41.0}


def _idle_since_zero(sleep_s: int | None) -> SleepCourtesy:
    c = SleepCourtesy()
    c.sleep_s = sleep_s
    c.slots_read(0.0, processing=False)
    return c


def test_slots_are_let_alone_after_a_few_idle_seconds_until_a_request_shows_on_metrics() -> None:
    c = _idle_since_zero(sleep_s=30)
    assert not c.skip_slots(QUIET_AFTER_S - 1, IDLE, sleeping=False)
    assert c.skip_slots(QUIET_AFTER_S, IDLE, sleeping=False)
    assert c.skip_slots(60.0, IDLE, sleeping=True)
    assert "/metrics shows when a request comes" in c.reason()
    assert not c.skip_slots(61.0, ONE_MORE_REQUEST, sleeping=False)  # a request came: the slots are read again


def test_a_server_that_never_sleeps_is_asked_every_poll() -> None:
    for sleep_s in (None, 0, -1):
        c = _idle_since_zero(sleep_s)
        assert not c.skip_slots(600.0, IDLE, sleeping=False)


def test_a_busy_slot_keeps_the_slots_asked() -> None:
    c = _idle_since_zero(sleep_s=30)
    c.slots_read(3.0, processing=True)
    assert not c.skip_slots(3.0 + QUIET_AFTER_S + 1, IDLE, sleeping=False)


def test_without_metrics_the_slots_are_looked_at_once_the_server_should_be_asleep() -> None:
    c = _idle_since_zero(sleep_s=30)
    assert c.skip_slots(QUIET_AFTER_S, None, sleeping=False)
    assert "without /metrics a new request is seen only once" in c.reason()
    assert "35 s have passed" in c.reason()
    assert c.skip_slots(QUIET_AFTER_S + 30 + QUIET_AFTER_S, None, sleeping=False)
    assert c.skip_slots(QUIET_AFTER_S + 36 + QUIET_AFTER_S, None, sleeping=True)  # asleep: let it sleep
    assert not c.skip_slots(QUIET_AFTER_S + 37 + QUIET_AFTER_S, None, sleeping=False)  # awake: something uses it
