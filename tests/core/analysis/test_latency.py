"""Latency per reply: time to first token and inter-token latency from the request's own timings, llama-server's
counters and vLLM's histograms; the session's percentiles; the exporter's histograms; the prefill-bound advice; and
the real llama-server's own reply timings read back."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from real_llama_server import KVMON_TIMEOUT_S

from kvmon.core.alert_types import AlertFacts
from kvmon.core.alerts import AlertEngine
from kvmon.core.analysis.latency import ITL_BUCKETS_S, MAX_REPLIES, TTFT_BUCKETS_S, LatencyTracker
from kvmon.core.readings import RequestStats, ServerReading
from kvmon.core.snapshot import AlertLevel

LLAMA = ("prompt_seconds_total", "prompt_tokens_total", "tokens_predicted_seconds_total", "tokens_predicted_total")


def _r(metrics: dict[str, float] | None = None, last: RequestStats | None = None) -> ServerReading:
    return ServerReading(t_monotonic=0.0, t_wall=0.0, backend="llama-server", url="http://x", metrics=metrics or {},
                         last_request=last)


def _llama(*values: float) -> ServerReading:
    return _r(dict(zip(LLAMA, values, strict=True)))


def test_llama_server_counters_make_one_reply_per_rise() -> None:
    t = LatencyTracker()
    assert t.update(_llama(0.0, 0.0, 0.0, 0.0))[0] is None  # the first reading: nothing has ended yet
    assert t.update(_llama(0.5, 1000.0, 0.0, 0.0))[0] is None  # a prompt processed: its reply has not ended
    v, _ = t.update(_llama(0.5, 1000.0, 2.0, 100.0))  # the reply ends: 100 tokens in 2 s
    assert v is not None and v.replies == 1 and v.source == "server counters"
    assert (v.ttft_last_s, v.last_prompt_tokens, v.last_prefill_tok_s) == (0.5, 1000, 2000.0)
    assert v.itl_last_s == pytest.approx(0.02) and v.last_generate_s == pytest.approx(2.0)
    v, _ = t.update(_llama(8.5, 9000.0, 3.0, 150.0))  # a long prompt, then a short answer, in one interval
    assert v is not None and v.replies == 2 and v.ttft_last_s == pytest.approx(8.0)
    assert (v.ttft_p50_s, v.ttft_p95_s) == (0.5, pytest.approx(8.0))
    assert v.itl_count == 2 and v.itl_buckets[-1] == 2 and v.ttft_sum_s == pytest.approx(8.5)


def _busy(t: float, *values: float, running: bool) -> ServerReading:
    """llama-server's counters at ``t`` with its one slot processing a request (``running``) or idle."""
    from kvmon.core.readings import SlotReading

    slot = SlotReading(id=0, n_ctx=4096, context_tokens=2000, processing=running, n_decoded=10 if running else None)
    return ServerReading(t_monotonic=t, t_wall=t, backend="llama-server", url="http://x",
                         metrics=dict(zip(LLAMA, values, strict=True)), slots=(slot,))


def test_a_reply_that_ended_while_another_ran_is_no_one_replys_first_token_time() -> None:
    """Short replies one after another: between two polls one ended and the next one's prompt was read (it runs at
    the poll), and more may have come and gone. The counters' sums are no one reply's times: their time per token
    is kept, their first-token time is not (it added two prompts' seconds up as one), and the count becomes a lower
    bound, for a minute after; then one reply per rise again."""
    from kvmon.core.analysis.latency import SEVERAL_MEMORY_S

    t = LatencyTracker()
    t.update(_busy(0.0, 0.0, 0.0, 0.0, 0.0, running=True))
    t.update(_busy(1.0, 0.05, 20.0, 0.0, 0.0, running=True))  # the first prompt read, decoding
    v, notes = t.update(_busy(2.0, 0.10, 40.0, 0.2, 400.0, running=True))  # it ended; the next one's prompt read
    assert v is not None and v.replies_at_least and v.replies == 1
    assert v.ttft_last_s is None and v.ttft_count == 0 and v.last_generate_s is None
    assert v.itl_last_s == pytest.approx(0.2 / 400) and "faster than kvmon polls" in notes.reasons["latency.replies"]
    v, _ = t.update(_busy(3.0, 0.10, 40.0, 0.5, 1000.0, running=False))  # ended, idle: one reply or more
    assert v is not None and v.ttft_count == 0 and v.replies == 2 and v.replies_at_least
    later = 3.0 + SEVERAL_MEMORY_S + 1
    t.update(_busy(later, 0.30, 60.0, 0.5, 1000.0, running=True))  # a prompt read a minute later
    v, _ = t.update(_busy(later + 1, 0.30, 60.0, 0.9, 1400.0, running=False))
    assert v is not None and v.ttft_last_s == pytest.approx(0.2) and v.ttft_count == 1
    assert v.replies == 3 and v.replies_at_least  # the session's count stays a lower bound


def test_more_tokens_than_the_slot_holds_are_several_replies_even_with_the_server_idle_at_both_polls() -> None:
    """Replies that came and went between two polls with the slot idle at both: a reply's prompt and tokens are what
    its slot then holds (plus one, measured on b11549), so more than that is more than one reply; as much is one."""
    t = LatencyTracker()
    t.update(_busy(0.0, 0.0, 0.0, 0.0, 0.0, running=False))
    one, _ = t.update(_busy(1.0, 0.05, 1500.0, 0.2, 501.0, running=False))  # 1,500 + 501 = held 2,000 + 1: one reply
    assert one is not None and not one.replies_at_least and one.ttft_last_s == pytest.approx(0.05)
    many, _ = t.update(_busy(2.0, 0.15, 4500.0, 0.6, 1503.0, running=False))  # three times as much
    assert many is not None and many.replies_at_least and many.ttft_last_s is None and many.ttft_count == 1


def test_a_restarted_server_starts_its_counters_again_without_a_reply() -> None:
    t = LatencyTracker()
    t.update(_llama(5.0, 5000.0, 10.0, 500.0))
    assert t.update(_llama(0.1, 10.0, 0.0, 0.0))[0] is None  # fell: the server restarted
    v, _ = t.update(_llama(0.2, 20.0, 1.0, 50.0))
    assert v is not None and v.replies == 1 and v.ttft_last_s == pytest.approx(0.1)


def test_a_request_s_own_timings_count_once() -> None:
    t = LatencyTracker()
    req = RequestStats(t_end=10.0, prompt_tokens=3000, cached_tokens=1000, prompt_seconds=1.0, predicted_tokens=200,
                       predicted_seconds=5.0)
    v, _ = t.update(_r(last=req))
    assert v is not None and v.source == "request timings"
    assert (v.ttft_last_s, v.last_prompt_tokens, v.last_prefill_tok_s, v.itl_last_s) == (1.0, 2000, 2000.0, 0.025)
    assert t.update(_r(last=req))[0].replies == 1  # type: ignore[union-attr]  # the same request seen again


def test_vllm_histograms_give_the_means_of_each_poll() -> None:
    t = LatencyTracker()
    base = {"time_to_first_token_seconds_sum": 1.0, "time_to_first_token_seconds_count": 4.0,
            "inter_token_latency_seconds_sum": 2.0, "inter_token_latency_seconds_count": 100.0}
    assert t.update(_r(base))[0] is None
    v, _ = t.update(_r({**base, "time_to_first_token_seconds_sum": 2.5, "time_to_first_token_seconds_count": 7.0,
                     "inter_token_latency_seconds_sum": 5.0, "inter_token_latency_seconds_count": 200.0}))
    assert v is not None and v.source.startswith("vLLM histograms")  # type: ignore[union-attr]
    assert v.ttft_last_s == pytest.approx(0.5) and v.itl_last_s == pytest.approx(0.03)


def test_percentiles_and_cumulative_buckets() -> None:
    t = LatencyTracker()
    for i in range(1, 101):  # 100 replies: TTFT 0.1 … 10 s
        t.update(_r(last=RequestStats(t_end=float(i), prompt_seconds=i / 10, predicted_tokens=10,
                                      predicted_seconds=0.1 * (1 + i % 3))))
    v = t.view()
    assert v is not None and v.replies == 100
    assert (v.ttft_p50_s, v.ttft_p95_s) == (pytest.approx(5.0), pytest.approx(9.5))
    assert len(v.ttft_buckets) == len(TTFT_BUCKETS_S) + 1 and v.ttft_buckets[-1] == 100
    assert list(v.ttft_buckets) == sorted(v.ttft_buckets)  # cumulative
    assert v.ttft_buckets[TTFT_BUCKETS_S.index(1.0)] == 10  # 0.1 … 1.0 s
    assert len(v.itl_buckets) == len(ITL_BUCKETS_S) + 1


def test_the_percentiles_are_over_the_last_replies_only() -> None:
    """Past MAX_REPLIES, the oldest reply leaves the percentiles (kept sorted as they arrive, not sorted per reply)."""
    t = LatencyTracker()
    values = [((i * 7919) % 1000) / 100 for i in range(MAX_REPLIES + 500)]  # 0 … 9.99 s, out of order
    for i, ttft in enumerate(values):
        t.update(_r(last=RequestStats(t_end=float(i), prompt_seconds=ttft, predicted_tokens=10,
                                      predicted_seconds=ttft / 100 + 0.01)))
    v = t.view()
    kept = sorted(values[-MAX_REPLIES:])
    assert v is not None and v.replies == MAX_REPLIES + 500  # the count is the session's, the percentiles the last
    assert v.ttft_p50_s == kept[math.ceil(0.5 * MAX_REPLIES) - 1]
    assert v.ttft_p95_s == kept[math.ceil(0.95 * MAX_REPLIES) - 1]
    itl = sorted(x / 100 / 10 + 0.001 for x in values[-MAX_REPLIES:])
    assert v.itl_p95_s == pytest.approx(itl[math.ceil(0.95 * MAX_REPLIES) - 1])


def test_the_exporter_has_histograms_not_gauges() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from kvmon.core.report_prometheus import snapshot_families
    from kvmon.core.snapshot import Connection, ConnectionStatus, Snapshot

    t = LatencyTracker()
    t.update(_llama(0.0, 0.0, 0.0, 0.0))
    t.update(_llama(0.7, 700.0, 1.0, 50.0))
    s = Snapshot(seq=1, t_monotonic=0.0, t_wall=0.0, connection=Connection(ConnectionStatus.CONNECTED),
                 url="http://x", latency=t.view())

    class _One:
        def collect(self):  # type: ignore[no-untyped-def]
            return snapshot_families(s, backend="llama-server", server="http://x")

    reg = CollectorRegistry()
    reg.register(_One())
    text = generate_latest(reg).decode()
    assert "# TYPE kvmon_time_to_first_token_seconds histogram" in text
    assert 'kvmon_time_to_first_token_seconds_bucket{backend="llama-server",le="1",model="",server="http://x"} 1.0' \
        in text
    assert 'kvmon_time_to_first_token_seconds_bucket{backend="llama-server",le="0.5",model="",server="http://x"} 0.0' \
        in text
    assert "kvmon_inter_token_latency_seconds_count" in text and "kvmon_time_to_first_token_seconds_sum" in text


def test_a_long_prompt_that_outlasts_its_answer_is_prefill_bound() -> None:
    eng = AlertEngine()
    facts = AlertFacts(t_monotonic=0.0, last_ttft_s=12.0, last_generate_s=4.0, last_prompt_tokens=24_000,
                       last_prefill_tok_s=2000.0)
    (a,) = eng.update(facts)
    assert a.code == "prefill_bound" and a.level is AlertLevel.INFO
    assert "waited 12.0 s for its first token (24,000 prompt tokens at 2,000 tok/s)" in a.message
    assert "not the memory bus" in a.message
    for ttft, gen in ((3.0, 1.0), (12.0, 20.0)):  # a short wait, or an answer longer than its prompt: not said
        assert AlertEngine().update(AlertFacts(t_monotonic=0.0, last_ttft_s=ttft, last_generate_s=gen)) == ()


# ---- the real llama-server ---------------------------------------------------------------------------------

def test_the_real_servers_reply_timings_are_read_back(llama_server: Callable[..., object], tiny_gguf_dir: Path) -> None:
    """Each reply's time to first token and per-token latency are the ones llama-server put in its own reply (its
    counters and its reply's timings are two bookings of the same times: within 2 % of each other, seen here)."""
    pytest.importorskip("xllamacpp")
    from kvmon.app.build import open_monitor

    server = llama_server("llama", ["-c", "2048", "--metrics"])
    url = server.url  # type: ignore[attr-defined]
    with open_monitor(url, gpu=False, host=False, timeout_s=KVMON_TIMEOUT_S) as mon:
        mon.poll()  # the counters before
        timings = []
        for n in (48, 96):
            reply = httpx.post(f"{url}/completion", json={"prompt": "the memory bus " * 40, "n_predict": n,
                                                          "ignore_eos": True, "cache_prompt": False},
                               timeout=120).json()
            timings.append(reply["timings"])
            snap = mon.poll()
            lat = snap.latency
            assert lat is not None and lat.source == "server counters"
            t = timings[-1]
            assert math.isclose(lat.ttft_last_s, t["prompt_ms"] / 1000, rel_tol=0.02)
            assert math.isclose(lat.itl_last_s, t["predicted_ms"] / t["predicted_n"] / 1000, rel_tol=0.02)
            assert lat.last_prompt_tokens == t["prompt_n"]
    assert lat.replies == 2 and not lat.ttft_lower_bound
    ttfts = sorted(t["prompt_ms"] / 1000 for t in timings)
    assert math.isclose(lat.ttft_p95_s, ttfts[-1], rel_tol=0.02)


def test_with_a_draft_the_counters_time_to_first_token_is_said_to_be_a_lower_bound(
        llama_server: Callable[..., object], tiny_gguf_dir: Path) -> None:
    """With a draft model llama-server's prompt counter leaves out the draft's own prompt processing, which its
    reply's timings.prompt_ms has: kvmon's time to first token from the counters is at most the reply's, and it
    says it is a lower bound, on the Replies line too."""
    pytest.importorskip("xllamacpp")
    from tiny_gguf import make_gguf

    from kvmon.app.build import open_monitor
    from kvmon.gui.panels.latency import latency_text

    draft = make_gguf("llama", tiny_gguf_dir)  # the model's own file: its prompt processing is as long again
    server = llama_server("llama", ["-c", "2048", "--metrics", "--spec-type", "draft-simple", "-md", str(draft)])
    url = server.url  # type: ignore[attr-defined]
    with open_monitor(url, gpu=False, host=False, timeout_s=KVMON_TIMEOUT_S) as mon:
        mon.poll()
        reply = httpx.post(f"{url}/completion", json={"prompt": "the memory bus " * 100, "n_predict": 16,
                                                      "ignore_eos": True, "cache_prompt": False}, timeout=120).json()
        snap = mon.poll()
    lat = snap.latency
    assert lat is not None and lat.source == "server counters" and lat.ttft_lower_bound
    assert lat.ttft_last_s is not None and lat.ttft_last_s < reply["timings"]["prompt_ms"] / 1000
    assert "leaves out the draft's own prompt processing" in snap.reasons["latency.ttft"]
    line, tip = latency_text(snap)
    assert line.startswith("first token ≥") and "lower bounds" in tip




def test_lm_studio_replies_show_the_timings_the_proxy_read() -> None:
    """The LM Studio demo's replies end through kvmon proxy with LM Studio's own stats (REST v1: the rate and the time
    to first token, no generation time): each reply is timed (its wait for the first token, its seconds per token),
    not "ended, untimed" beside a decode rate from the same proxy. No prefill rate: that time holds the cached
    prompt and any load."""
    from kvmon.app.demo import demo_session, step_demo
    from kvmon.gui.panels.latency import latency_text

    session = demo_session("lmstudio", None, start_at_s=100, stepped=True)
    try:
        ended = [s for s in step_demo(session, 20.0, 1.0) if s.latency is not None]
    finally:
        session.close()
    lat = ended[-1].latency
    assert lat is not None and lat.replies > 0 and lat.source == "request timings"
    assert lat.ttft_last_s is not None and lat.itl_last_s is not None and lat.last_generate_s is not None
    assert lat.last_prefill_tok_s is None
    assert 27.0 * 0.9 <= 1 / lat.itl_last_s <= 33.0 * 1.1  # the scenario decodes 33 → 27 tok/s over its context
    line, tip = latency_text(ended[-1])
    assert line.startswith("first token ") and "untimed" not in line
    assert "request timings" in tip


def test_a_reply_whose_first_token_was_not_timed_says_so_in_words() -> None:
    """A reply timed per token but not to its first token (kvmon joined while it ran): words, not "— (p95 —)"."""
    from kvmon.core.snapshot import Connection, ConnectionStatus, LatencyView, Snapshot
    from kvmon.gui.panels.latency import latency_text

    s = Snapshot(seq=1, t_monotonic=0.0, t_wall=1.8e9, connection=Connection(ConnectionStatus.CONNECTED),
                 latency=LatencyView(replies=1, source="server counters", itl_last_s=0.0137, itl_p50_s=0.0137,
                                     itl_p95_s=0.0137))
    line, tip = latency_text(s)
    assert line == "first token not timed · 13.7 ms/token (p95 13.7 ms) · 1 reply", line
    assert "Last reply: first token not timed, then 13.7 ms per token." in tip and "—" not in tip, tip
