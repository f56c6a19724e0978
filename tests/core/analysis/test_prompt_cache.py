"""Prompt-cache forensics from each backend's figures: llama-server's counters, each reply's timings through the
proxy, Ollama's final chunk with its child's slots, vLLM's prefix-cache counters; the miss and what made the prompt
change, in the alert and the headline; the same prompt again; the next turn's time to first token."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from kvmon.core.analysis import Analyzer
from kvmon.core.analysis.prompt_cache import PromptCacheTracker
from kvmon.core.readings import (
    ModelInfo,
    PromptChangeReading,
    RequestStats,
    ServerConfig,
    ServerReading,
    SlotReading,
)
from kvmon.sources.backends import by_name

LLAMA = by_name("llama-server")


def reading(t: float, ctx: int | None, *, metrics: dict[str, float] | None = None, backend: str = "llama-server",
            processing: bool = False, cache: int | None = None, **kw: object) -> ServerReading:
    slot = SlotReading(id=0, n_ctx=65536, context_tokens=ctx, processing=processing, n_prompt_tokens_cache=cache)
    return ServerReading(t_monotonic=t, t_wall=1.8e9 + t, backend=by_name(backend), url="http://127.0.0.1:8080",
                         model=ModelInfo(name="m.gguf"), slots=(slot,), metrics=metrics or {},
                         config=ServerConfig(n_ctx_total=65536, n_parallel=1), **kw)  # type: ignore[arg-type]


def counters(read: float, reused: float, seconds: float) -> dict[str, float]:
    return {"prompt_tokens_total": read, "prompt_tokens_cached_total": reused, "prompt_seconds_total": seconds}


def test_llama_server_counters_count_each_turn_read_and_reused() -> None:
    p = PromptCacheTracker()
    assert p.update(reading(0.0, 0, metrics=counters(0, 0, 0)), 0) is None
    v = p.update(reading(1.0, 1200, metrics=counters(1200, 0, 1.0)), 1200)
    assert v is not None and (v.last_reread_tokens, v.last_reused_tokens) == (1200, 0)
    v = p.update(reading(2.0, 1600, metrics=counters(1500, 1200, 1.3)), 1600)
    assert v is not None and (v.last_reread_tokens, v.last_reused_tokens, v.last_reread_s) == (300, 1200,
                                                                                               pytest.approx(0.3))
    assert (v.reads, v.reread_tokens, v.reused_tokens, v.misses) == (2, 1500, 1200, 0)
    assert v.source == "the server's counters" and v.miss is None


def test_a_long_conversation_read_again_whole_is_a_miss_with_its_cost() -> None:
    a = Analyzer()
    a.update(reading(0.0, 39_000, metrics=counters(39_000, 0, 40.0)))
    a.update(reading(5.0, 39_300, metrics=counters(39_000, 0, 40.0)))  # the conversation holds 39.3K
    s = a.update(reading(60.0, 39_800, metrics=counters(78_528, 0, 81.0)))  # 39,528 read again: 41 s
    v = s.prompt_cache
    assert v is not None and v.miss is not None and (v.miss.reread_tokens, v.misses) == (39_528, 1)
    (alert,) = [x for x in s.alerts if x.code == "prompt_cache_miss"]
    assert alert.message.startswith("Cache miss: 39,528 prompt tokens read again, 41 s (the cache reused 0): ")
    assert "kvmon proxy" in alert.message
    assert s.verdict is not None and s.verdict.state == "Cache miss"
    assert s.verdict.sentence == "Cache miss: 39,528 prompt tokens read again, 41 s: the conversation's prompt changed"
    # the next turn reuses the cache: the miss is no longer news
    s = a.update(reading(90.0, 40_200, metrics=counters(78_900, 39_800, 81.4)))
    assert s.prompt_cache is not None and s.prompt_cache.miss is None


def test_a_new_short_chat_is_no_miss() -> None:
    a = Analyzer()
    a.update(reading(0.0, 300, metrics=counters(300, 0, 0.3)))
    s = a.update(reading(5.0, 3000, metrics=counters(3300, 0, 3.0)))
    assert s.prompt_cache is not None and s.prompt_cache.miss is None
    assert not [x for x in s.alerts if x.code == "prompt_cache_miss"]


def test_the_proxys_change_names_the_cause_in_the_alert_and_the_headline() -> None:
    now = time.time()
    change = PromptChangeReading(
        sentence="system message changed at character 212 — looks like a timestamp",
        fix="keep the system prompt stable; put the date, time or anything that changes in the last user message",
        message_index=0, role="system", offset=212, change="timestamp", count=5, first_unix=now - 600,
        last_unix=now + 60, reread_tokens=190_000, reread_seconds=200.0)
    a = Analyzer()
    a.update(reading(0.0, 39_000, metrics=counters(39_000, 0, 40.0)))
    r = reading(60.0, 39_800, metrics=counters(78_528, 54, 81.0), prompt_changes=(change,))
    s = a.update(replace(r, t_wall=now + 60))
    (alert,) = [x for x in s.alerts if x.code == "prompt_cache_miss"]
    since = time.strftime("%H:%M", time.localtime(now - 600))
    assert alert.message == (
        "Cache miss: 39,528 prompt tokens read again, 41 s (the cache reused 54): system message changed at character "
        f"212 — looks like a timestamp; 5 times since {since}, ≈ 3 min of prompt reading in all; keep the system "
        "prompt stable; put the date, time or anything that changes in the last user message")
    assert s.verdict is not None and s.verdict.sentence == (
        "Cache miss: 39,528 prompt tokens read again, 41 s — system message changed at character 212 — looks like a "
        "timestamp")


def test_a_change_of_a_kind_kvmon_does_not_name_is_left_out() -> None:
    """A proxy's change whose kind is not one the document names (another version's, or a broken body) is dropped;
    the others are kept as the proxy sent them."""
    known = PromptChangeReading(sentence="user message 3 changed at character 40 — a number changed", fix="",
                                message_index=3, role="user", offset=40, change="number", count=2, first_unix=1.8e9,
                                last_unix=1.8e9 + 5, reread_tokens=900, reread_seconds=0.5)
    odd = replace(known, sentence="system message changed — a whim", change="whim")
    v = PromptCacheTracker().update(reading(1.0, 393, metrics=counters(393, 0, 0.4), prompt_changes=(odd, known)), 393)
    assert v is not None and [(c.sentence, c.change, c.count, c.reread_tokens) for c in v.changes] == [
        ("user message 3 changed at character 40 — a number changed", "number", 2, 900)]


def test_each_replys_timings_through_the_proxy() -> None:
    p = PromptCacheTracker()
    req = RequestStats(t_end=1.0, prompt_tokens=331, cached_tokens=54, prompt_seconds=0.032, reread_tokens=331,
                       predicted_tokens=8, predicted_seconds=0.004, context_tokens=393)
    v = p.update(reading(1.0, 393, last_request=req), 393)
    assert v is not None and v.source == "each reply's timings"
    assert (v.last_reread_tokens, v.last_reused_tokens, v.last_reread_s) == (331, 54, 0.032)
    assert p.update(reading(2.0, 393, last_request=req), 393).reads == 1  # type: ignore[union-attr]  # counted once


def test_ollamas_final_chunk_and_its_childs_slots() -> None:
    """Ollama's count holds the cached tokens; its llama-server child showed 30,000 reused while the prompt was read."""
    p = PromptCacheTracker()
    assert p.update(reading(0.0, 30_100, backend="ollama", processing=True, cache=30_000), 30_100) is None
    req = RequestStats(t_end=1.0, prompt_tokens=None, prompt_seconds=0.4, predicted_tokens=200,
                       predicted_seconds=4.0, context_tokens=30_800)
    v = p.update(reading(5.0, 30_800, backend="ollama", last_request=req), 30_800)
    assert v is not None and (v.last_reread_tokens, v.last_reused_tokens, v.last_reread_s) == (600, 30_000, 0.4)


def test_vllms_prefix_cache_counters() -> None:
    p = PromptCacheTracker()
    m = {"prefix_cache_queries_total": 1000.0, "prefix_cache_hits_total": 0.0,
         "request_prefill_time_seconds_sum": 0.1}
    p.update(reading(0.0, 1000, backend="vllm", metrics=m), 1000)
    m2 = {"prefix_cache_queries_total": 2400.0, "prefix_cache_hits_total": 992.0,
          "request_prefill_time_seconds_sum": 0.15}
    v = p.update(reading(1.0, 1400, backend="vllm", metrics=m2), 1400)
    assert v is not None and (v.last_reread_tokens, v.last_reused_tokens) == (408, 992)
    assert v.last_reread_s == pytest.approx(0.05)


def test_the_same_prompt_again_and_again() -> None:
    a = Analyzer()
    req = RequestStats(t_end=1.0, prompt_tokens=10, cached_tokens=990, reread_tokens=10, prompt_seconds=0.01,
                       prompt_repeated=3)
    s = a.update(reading(1.0, 1000, last_request=req))
    (alert,) = [x for x in s.alerts if x.code == "prompt_repeated"]
    assert alert.message.startswith("The same prompt was sent 4 times in a row: a client retrying or looping")


def test_the_next_turns_time_to_first_token_at_this_depth() -> None:
    p = PromptCacheTracker()
    p.update(reading(0.0, 0, metrics=counters(0, 0, 0)), 0)
    depth, read, reused, secs = 0, 0.0, 0.0, 0.0
    for i in range(1, 6):  # turns of 800 tokens; reading slows with depth: 1 ms + 20 ns per token of depth
        per_token = 1e-3 + 2e-8 * (depth + 400)
        read, reused, secs = read + 800, reused + depth, secs + 800 * per_token
        depth += 800 + 200
        v = p.update(reading(float(i), depth, metrics=counters(read, reused, secs)), depth)
    assert v is not None and v.next_prompt_tokens == 800
    assert v.next_ttft_s == pytest.approx(800 * (1e-3 + 2e-8 * (depth + 400)), rel=1e-6)


def test_the_next_turns_wait_while_the_cache_keeps_missing_reads_the_whole_conversation_and_its_growth() -> None:
    p = PromptCacheTracker()
    p.update(reading(0.0, 0, metrics=counters(0, 0, 0)), 0)
    read, secs, total = 0.0, 0.0, 10_000
    for i in range(1, 6):  # each turn's prompt read whole (nothing reused), 1,500 tokens longer than the last
        read, secs = read + total, secs + total * 1e-3
        v = p.update(reading(float(i), total + 300, metrics=counters(read, 0, secs)), total + 300)
        total += 1500
    assert v is not None and v.miss is not None
    # the last prompt (16,000) and what each turn added (1,500), read from the start at 1 ms a token
    assert v.next_prompt_tokens == 17_500
    assert v.next_ttft_s == pytest.approx(17.5, rel=1e-6)
