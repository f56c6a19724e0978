"""Counter → rate: decode tok/s from the real generating captures, resets, idle, EWMA."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from helpers_http import LLAMA_FIXTURES

from kvmon.core.rates import CounterRate, SlotRateTracker
from kvmon.core.readings import ServerReading, SlotReading
from kvmon.sources.llamacpp.parse import parse_metrics, parse_slot

# The README: the generating captures were taken about 2 s and 4 s into the stream (no Date headers).
CAPTURE_GAP_S = 2.0


def _reading(t: float, slots: tuple[SlotReading, ...], metrics: dict[str, float] | None = None,
             total_slots: int | None = None) -> ServerReading:
    return ServerReading(t_monotonic=t, t_wall=1e9 + t, backend="llama-server", url="http://x", slots=slots,
                         metrics=metrics or {}, total_slots=total_slots if total_slots is not None else len(slots))


def _capture_reading(state: str, t: float) -> ServerReading:
    raw = json.loads((LLAMA_FIXTURES / f"slots.{state}.json").read_text())
    slots = tuple(s for s in (parse_slot(x, {}) for x in raw) if s is not None)
    metrics = parse_metrics((LLAMA_FIXTURES / f"metrics.{state}.txt").read_text())
    return _reading(t, slots, metrics)


def _slot(n_decoded: int | None, held: int | None, *, task: int = 1, processing: bool = True) -> tuple[SlotReading]:
    return (SlotReading(id=0, n_ctx=4096, context_tokens=held, processing=processing, n_decoded=n_decoded,
                        id_task=task),)


def test_generating_captures_give_the_decode_rate() -> None:
    tr = SlotRateTracker()
    first = tr.update(_capture_reading("generating", 100.0))
    assert first.decode_tok_s is None  # one sample is no rate
    second = tr.update(_capture_reading("generating-later", 100.0 + CAPTURE_GAP_S))
    expected = (1635 - 1037) / CAPTURE_GAP_S  # n_decoded 1037 → 1635
    assert second.decode_tok_s == pytest.approx(expected)
    assert second.per_slot_decode_tok_s == {0: pytest.approx(expected)}
    assert second.decode_rate_source == "slots"
    assert second.prefill_tok_s is None  # decoding, not prefilling


def test_idle_gives_none_not_zero() -> None:
    tr = SlotRateTracker()
    tr.update(_capture_reading("idle", 0.0))
    s = tr.update(_capture_reading("idle-after", 1.0))
    assert s.decode_tok_s is None and s.prefill_tok_s is None
    assert s.per_slot_decode_tok_s == {0: None}


def test_generation_end_goes_back_to_none() -> None:
    tr = SlotRateTracker()
    tr.update(_capture_reading("generating", 0.0))
    assert tr.update(_capture_reading("generating-later", 2.0)).decode_tok_s is not None
    assert tr.update(_capture_reading("after-long-stream", 3.0)).decode_tok_s is None


def test_new_request_resets_cleanly() -> None:
    tr = SlotRateTracker()
    tr.update(_reading(0.0, _slot(100, 1100, task=1)))
    assert tr.update(_reading(1.0, _slot(150, 1150, task=1))).decode_tok_s == pytest.approx(50.0)
    # a new request on the same slot starts again at a small n_decoded: no negative or huge rate
    s = tr.update(_reading(2.0, _slot(3, 40, task=2)))
    assert s.decode_tok_s is None
    assert tr.update(_reading(3.0, _slot(43, 80, task=2))).decode_tok_s == pytest.approx(40.0)


def test_n_decoded_falling_without_task_id_resets() -> None:
    tr = SlotRateTracker()
    tr.update(_reading(0.0, _slot(500, 600, task=7)))
    assert tr.update(_reading(1.0, _slot(20, 40, task=7))).decode_tok_s is None


def test_server_restart_resets_counters() -> None:
    tr = SlotRateTracker()
    tr.update(_reading(0.0, (), {"n_decode_total": 5000.0, "prompt_tokens_total": 900, "prompt_seconds_total": 3},
                       total_slots=1))
    s = tr.update(_reading(1.0, (), {"n_decode_total": 10.0, "prompt_tokens_total": 0, "prompt_seconds_total": 0},
                           total_slots=1))
    assert s.decode_tok_s is None and s.prefill_tok_s is None
    s = tr.update(_reading(2.0, (), {"n_decode_total": 70.0, "prompt_tokens_total": 20, "prompt_seconds_total": 0.1},
                           total_slots=1))
    assert s.decode_tok_s is None and s.prefill_tok_s == pytest.approx(200.0)  # its prompt read: decoding began
    s = tr.update(_reading(3.0, (), {"n_decode_total": 130.0, "prompt_tokens_total": 20, "prompt_seconds_total": 0.1},
                           total_slots=1))
    assert s.decode_tok_s == pytest.approx(60.0) and s.decode_rate_source == "metrics"


def _counted(t: float, n_decode: float, prompt: float, predicted: float, running: int | None = None) -> ServerReading:
    """A reading of a server without /slots: its counters (and its count of running requests, where it says it)."""
    r = _reading(t, (), {"n_decode_total": n_decode, "prompt_tokens_total": prompt,
                         "prompt_seconds_total": prompt / 1000, "tokens_predicted_total": predicted}, total_slots=1)
    return dataclasses.replace(r, requests_running=running)


@pytest.mark.parametrize("running", [None, 1])
def test_n_decode_is_a_decode_speed_only_between_a_prompt_read_and_the_reply_end(running: int | None) -> None:
    """n_decode_total counts a prompt's batches too: while a long prompt is read it moves ~8 times a second, which is
    no decode speed. Generation runs from the prompt counter's move to the generated-token counter's; an interval
    in which either moved is blended."""
    tr = SlotRateTracker()
    assert tr.update(_counted(0.0, 100, 500, 40, running)).decode_tok_s is None
    for t, n in ((1.0, 108), (2.0, 116), (3.0, 124)):  # a long prompt's batches
        s = tr.update(_counted(t, n, 500, 40, running))
        assert s.decode_tok_s is None and s.prefill_tok_s is None
    s = tr.update(_counted(4.0, 160, 6500, 40, running))  # the prompt read, decoding began inside the interval
    assert s.decode_tok_s is None and s.prefill_tok_s == pytest.approx(1000.0)
    s = tr.update(_counted(5.0, 210, 6500, 40, running))
    assert s.decode_tok_s == pytest.approx(50.0) and s.decode_rate_source == "metrics"
    assert tr.update(_counted(6.0, 260, 6500, 40, running)).decode_tok_s == pytest.approx(50.0)
    assert tr.update(_counted(7.0, 290, 6500, 170, 0 if running else None)).decode_tok_s is None  # the reply ended
    for t, n in ((8.0, 298), (9.0, 306)):  # the next request's prompt: batches again
        assert tr.update(_counted(t, n, 6500, 170, running)).decode_tok_s is None


def test_after_a_restart_the_counters_say_nothing_of_the_phase_until_a_prompt_is_read() -> None:
    """A server restarted while it generated: its counters start again, and the new server's first moves of
    n_decode_total may be a prompt's batches; they are no decode speed until its prompt counter moves."""
    tr = SlotRateTracker()
    tr.update(_counted(0.0, 100, 500, 40))
    tr.update(_counted(1.0, 150, 900, 40))  # a prompt read: generating
    assert tr.update(_counted(2.0, 200, 900, 40)).decode_tok_s == pytest.approx(50.0)
    assert tr.update(_counted(3.0, 4, 0, 0)).decode_tok_s is None  # restarted: counters back near 0
    assert tr.update(_counted(4.0, 12, 0, 0)).decode_tok_s is None  # a prompt's batches, not 8 tok/s
    assert tr.update(_counted(5.0, 60, 3000, 0)).decode_tok_s is None  # its prompt read inside this interval
    assert tr.update(_counted(6.0, 110, 3000, 0)).decode_tok_s == pytest.approx(50.0)


def test_a_prompt_read_with_nothing_running_after_it_is_no_generation() -> None:
    """A request read and ended inside one interval, the server's count at 0 after it: the counter's next moves are
    another prompt's batches until that prompt is read."""
    tr = SlotRateTracker()
    tr.update(_counted(0.0, 100, 500, 40, 0))
    assert tr.update(_counted(1.0, 120, 600, 50, 0)).decode_tok_s is None
    assert tr.update(_counted(2.0, 128, 600, 50, 1)).decode_tok_s is None  # a new prompt's batches


def test_metrics_fallback_only_with_one_slot() -> None:
    tr = SlotRateTracker()
    tr.update(_reading(0.0, (), {"n_decode_total": 0.0}, total_slots=4))
    assert tr.update(_reading(1.0, (), {"n_decode_total": 100.0}, total_slots=4)).decode_tok_s is None


def test_metrics_counter_not_moving_is_no_data() -> None:
    tr = SlotRateTracker()
    tr.update(_reading(0.0, (), {"n_decode_total": 5.0}, total_slots=1))
    assert tr.update(_reading(1.0, (), {"n_decode_total": 5.0}, total_slots=1)).decode_tok_s is None


def test_prefill_from_tokens_held_growing() -> None:
    tr = SlotRateTracker()
    tr.update(_reading(0.0, _slot(0, 2048)))
    s = tr.update(_reading(2.0, _slot(0, 4096)))
    assert s.prefill_tok_s == pytest.approx(1024.0)
    assert s.decode_tok_s is None  # nothing generated yet: no decode data, not 0


def test_prefill_from_prompt_counters() -> None:
    tr = SlotRateTracker()
    tr.update(_reading(0.0, (), {"prompt_tokens_total": 100.0, "prompt_seconds_total": 1.0}))
    s = tr.update(_reading(1.0, (), {"prompt_tokens_total": 4196.0, "prompt_seconds_total": 9.0}))
    assert s.prefill_tok_s == pytest.approx(512.0)


def test_two_slots_add_up() -> None:
    tr = SlotRateTracker()

    def two(a: int, b: int) -> tuple[SlotReading, ...]:
        return (SlotReading(0, 8192, a + 10, True, n_decoded=a, id_task=1),
                SlotReading(1, 8192, b + 10, True, n_decoded=b, id_task=2))

    tr.update(_reading(0.0, two(10, 5)))
    s = tr.update(_reading(1.0, two(40, 25)))
    assert s.decode_tok_s == pytest.approx(50.0)
    assert s.per_slot_decode_tok_s == {0: pytest.approx(30.0), 1: pytest.approx(20.0)}


def test_the_interval_in_which_decoding_began_is_not_a_decode_sample() -> None:
    """Prefill for 0.8 s, then 20 tokens in 0.2 s: 20 tok/s over that poll would understate 100 tok/s."""
    tr = SlotRateTracker()

    def one(held: int, decoded: int) -> tuple[SlotReading, ...]:
        return (SlotReading(0, 8192, held, True, n_decoded=decoded, id_task=7),)

    tr.update(_reading(0.0, one(2048, 0)))  # prompt being processed
    assert tr.update(_reading(1.0, one(4116, 20))).decode_tok_s is None
    assert tr.update(_reading(2.0, one(4216, 120))).decode_tok_s == pytest.approx(100.0)


def test_the_interval_in_which_decoding_began_is_no_prefill_sample_either() -> None:
    """The prompt's last 2,048 tokens and 20 generated ones in one second: 2,068 tok/s of "prefill" from the slot
    would blend the two (on the real server such intervals read 178–405 tok/s against ~2,000); the server's own
    prompt timing for the finished prompt says it instead, and without it nothing does."""
    tr = SlotRateTracker()

    def one(held: int, decoded: int) -> tuple[SlotReading, ...]:
        return (SlotReading(0, 8192, held, True, n_decoded=decoded, id_task=7),)

    tr.update(_reading(0.0, one(2048, 0)))
    assert tr.update(_reading(1.0, one(4116, 20))).prefill_tok_s is None
    tr = SlotRateTracker()
    tr.update(_reading(0.0, one(2048, 0), {"prompt_tokens_total": 0.0, "prompt_seconds_total": 0.0}))
    s = tr.update(_reading(1.0, one(4116, 20), {"prompt_tokens_total": 4096.0, "prompt_seconds_total": 2.0}))
    assert s.prefill_tok_s == pytest.approx(2048.0)


def test_a_proxied_streams_depth_is_no_prefill() -> None:
    """A depth kvmon put together from a proxy's stream grows when the proxy learns the last reply's stats, not as
    the server processes a prompt (the LM Studio demo read "prompt 4 tok/s" from it)."""
    tr = SlotRateTracker()

    def proxied(held: int) -> tuple[SlotReading, ...]:
        return (SlotReading(0, 8192, held, True, n_decoded=0, context_estimated=True),)

    tr.update(_reading(0.0, proxied(0)))
    assert tr.update(_reading(1.0, proxied(900))).prefill_tok_s is None


def test_long_gap_restarts() -> None:
    tr = SlotRateTracker()
    tr.update(_reading(0.0, _slot(0, 10)))
    assert tr.update(_reading(100.0, _slot(5000, 5010))).decode_tok_s is None


def test_counter_rate_ewma_and_reset() -> None:
    r = CounterRate(tau_s=2.0)
    assert r.update(0.0, 0.0) is None
    assert r.update(1.0, 100.0) == pytest.approx(100.0)
    alpha = 1 - math.exp(-0.5)
    assert r.update(2.0, 150.0) == pytest.approx(100.0 + alpha * (50.0 - 100.0))
    assert r.update(2.0, 160.0) == r.rate  # no time passed: unchanged
    assert r.update(3.0, 10.0) is None  # fell: reset
    assert r.update(4.0, 30.0) == pytest.approx(20.0)
    assert r.update(5.0, None) is None
    assert r.update(6.0, float("nan")) is None


def test_source_name_follows_the_reading() -> None:
    tr = SlotRateTracker()
    child = _slot(10, 110)
    r0 = ServerReading(t_monotonic=0.0, t_wall=0.0, backend="ollama", url="u", slots=child,
                       live_rate_source="child_slots")
    tr.update(r0)
    r1 = ServerReading(t_monotonic=1.0, t_wall=1.0, backend="ollama", url="u", slots=_slot(40, 140),
                       live_rate_source="child_slots")
    s = tr.update(r1)
    assert s.decode_tok_s == pytest.approx(30.0) and s.decode_rate_source == "child_slots"


def _ended(tokens: float, seconds: float) -> dict[str, float]:
    """llama-server's counters of the replies that ended: tokens generated and the seconds spent generating them."""
    return {"tokens_predicted_total": tokens, "tokens_predicted_seconds_total": seconds}


def test_replies_shorter_than_a_poll_take_their_speed_from_the_servers_timing_of_them() -> None:
    """Each poll finds another request (the last one ended in between): no slot counter spans two polls, so the
    decode speed is the server's own timing of the replies that ended, while the next one runs."""
    tr = SlotRateTracker()
    tr.update(_reading(0.0, _slot(40, 120, task=1), _ended(0, 0.0)))
    s = tr.update(_reading(1.0, _slot(30, 110, task=2), _ended(900, 0.25)))  # replies of 900 tokens in 0.25 s
    assert s.decode_tok_s == pytest.approx(3600.0) and s.decode_rate_source == "replies"
    s = tr.update(_reading(2.0, _slot(10, 90, task=3), _ended(1500, 0.45)))
    assert s.decode_tok_s == pytest.approx(600 / 0.2)
    # the same request at both ends: its own counter says the speed now
    s = tr.update(_reading(3.0, _slot(410, 490, task=3), _ended(1500, 0.45)))
    assert s.decode_tok_s == pytest.approx(400.0) and s.decode_rate_source == "slots"


def test_no_ended_replies_speed_while_nothing_runs_or_several_requests_shared_the_interval() -> None:
    tr = SlotRateTracker()
    tr.update(_reading(0.0, _slot(40, 120, task=1), _ended(0, 0.0)))
    idle = tr.update(_reading(1.0, _slot(100, 180, task=1, processing=False), _ended(100, 0.05)))
    assert idle.decode_tok_s is None  # it ended and nothing runs: idle, not a speed
    two = SlotRateTracker()

    def both(t: float, tasks: tuple[int, int], ended: dict[str, float]) -> ServerReading:
        slots = tuple(SlotReading(id=i, n_ctx=4096, context_tokens=50, processing=True, n_decoded=5, id_task=task)
                      for i, task in enumerate(tasks))
        return _reading(t, slots, ended)

    two.update(both(0.0, (1, 2), _ended(0, 0.0)))
    s = two.update(both(1.0, (3, 4), _ended(800, 0.4)))
    assert s.decode_tok_s is None  # two replies may have run side by side: their mean is no one stream's speed
    assert s.decode_rate_source != "replies"


def test_an_impossible_ended_replies_speed_is_withheld() -> None:
    tr = SlotRateTracker()
    tr.update(_reading(0.0, _slot(40, 120, task=1), _ended(0, 0.0)))
    s = tr.update(_reading(1.0, _slot(30, 110, task=2), _ended(1e6, 0.5)))
    assert s.decode_tok_s is None and "past any physical bound" in s.reasons["decode_tok_s"]


def test_without_slots_an_ended_reply_gives_the_speed_while_the_server_says_one_runs() -> None:
    def r(t: float, prompt: float, predicted: float, seconds: float, running: int) -> ServerReading:
        m = {"prompt_tokens_total": prompt, "n_decode_total": predicted + prompt / 512, **_ended(predicted, seconds)}
        return dataclasses.replace(_reading(t, (), m, total_slots=1), requests_running=running)

    tr = SlotRateTracker()
    tr.update(r(0.0, 100, 0, 0.0, 1))
    s = tr.update(r(1.0, 200, 500, 0.2, 1))  # one reply ended, the next one's prompt was read
    assert s.decode_tok_s == pytest.approx(2500.0) and s.decode_rate_source == "replies"
    assert tr.update(r(2.0, 200, 900, 0.4, 0)).decode_tok_s is None  # nothing runs: idle
