"""Alert rules and hysteresis on synthetic time series: rising, steady, noisy at the threshold."""

from __future__ import annotations

import random

import pytest

from kvmon.core.alert_types import AlertFacts, AlertThresholds, CacheAdvice, GpuVramFacts
from kvmon.core.alerts import AlertEngine
from kvmon.core.snapshot import AlertLevel
from kvmon.core.units import GIB
from kvmon.sources.backends import by_name


def ctx_facts(t: float, ctx: int, n_ctx: int = 32768, decode: float | None = 38.0) -> AlertFacts:
    left = max(0, n_ctx - ctx)
    return AlertFacts(t_monotonic=t, backend=by_name("llama-server"), n_ctx=n_ctx, context_tokens=ctx,
                      tokens_until_ctx_full=left, seconds_until_ctx_full=left / decode if decode else None,
                      decode_tok_s=decode, metrics_enabled=True)


def codes(alerts: tuple) -> list[str]:
    return [a.code for a in alerts]


def test_context_full_rises_early_and_escalates() -> None:
    eng = AlertEngine()
    first_left = None
    levels = []
    for i in range(0, 900):
        ctx = 20_000 + 38 * i
        if ctx > 32768:
            break
        alerts = eng.update(ctx_facts(float(i), ctx))
        a = next((x for x in alerts if x.code == "ctx_full_soon"), None)
        if a is not None and first_left is None:
            first_left = 32768 - ctx
            assert "Context full in ~" in a.message and "at 38 tok/s" in a.message
            assert "of 32,768 used" in a.message
        if first_left is not None:
            assert a is not None  # never drops while the context keeps filling
            levels.append(a.level)
    assert first_left is not None and first_left >= 2000
    assert levels[-1] is AlertLevel.CRITICAL
    assert AlertLevel.WARNING in levels


def test_message_numbers_are_computed() -> None:
    eng = AlertEngine()
    alerts = eng.update(ctx_facts(0.0, 32768 - 2287))
    (a,) = alerts
    assert a.message.startswith("Context full in ~2,300 tokens (≈ 1 min at 38 tok/s)")
    assert a.value == 2287


def test_steady_hour_raises_nothing() -> None:
    eng = AlertEngine()
    rng = random.Random(1)
    for i in range(3600):
        ctx = 8000 + rng.randint(-50, 50)
        g = GpuVramFacts(index=0, name="RTX 4090", vram_free_bytes=int(6 * GIB + rng.randint(-10, 10) * 2**20),
                         vram_total_bytes=24 * GIB, seconds_until_full=None)
        f = ctx_facts(float(i), ctx, decode=38.0 + rng.uniform(-2, 2))
        f = AlertFacts(**{**f.__dict__, "gpus": (g,), "kv_host_fraction": 0.0, "weights_host_bytes": 0,
                          "weight_bytes": 4_920_000_000})
        assert eng.update(f) == ()
        assert eng.last_raised == ()


def test_noisy_at_threshold_does_not_flap() -> None:
    th = AlertThresholds()
    eng = AlertEngine(th)
    rng = random.Random(7)
    raises = 0
    present = []
    for i in range(600):
        left = th.ctx_warn_tokens + rng.randint(-300, 300)
        eng.update(ctx_facts(float(i), 32768 - left, decode=None))
        raises += len(eng.last_raised)
        present.append("ctx_full_soon" in codes(eng.update(ctx_facts(i + 0.5, 32768 - left, decode=None))))
    assert raises == 1
    assert all(present[present.index(True):])


def test_clears_after_hold_when_a_new_chat_starts() -> None:
    th = AlertThresholds(min_hold_s=10.0)
    eng = AlertEngine(th)
    assert codes(eng.update(ctx_facts(0.0, 31000))) == ["ctx_full_soon"]
    # a new conversation: context drops, but the alert is held for min_hold_s
    assert codes(eng.update(ctx_facts(3.0, 200))) == ["ctx_full_soon"]
    assert codes(eng.update(ctx_facts(9.9, 200))) == ["ctx_full_soon"]
    assert codes(eng.update(ctx_facts(10.1, 200))) == []


def test_a_pause_between_answers_does_not_clear_a_filling_context() -> None:
    """Raised by time at 6,000 tokens left (under 2 min at 55 tok/s); the user then reads the answer for a minute (no
    decode rate: no time left to compute) and the chat goes on: the context did not empty, so the warning stays."""
    eng = AlertEngine()
    ctx = 32768 - 6000
    assert codes(eng.update(ctx_facts(0.0, ctx, decode=55.0))) == ["ctx_full_soon"]
    for t in range(1, 60):  # reading, nothing decodes
        assert codes(eng.update(ctx_facts(float(t), ctx, decode=None))) == ["ctx_full_soon"], t
    assert codes(eng.update(ctx_facts(61.0, ctx + 300, decode=55.0))) == ["ctx_full_soon"]


def test_critical_steps_down_only_past_its_clear_threshold() -> None:
    th = AlertThresholds(min_hold_s=0.0)
    eng = AlertEngine(th)
    (a,) = eng.update(ctx_facts(0.0, 32768 - 100))
    assert a.level is AlertLevel.CRITICAL
    (a,) = eng.update(ctx_facts(1.0, 32768 - th.ctx_critical_tokens - 100))  # within the band: stays critical
    assert a.level is AlertLevel.CRITICAL
    (a,) = eng.update(ctx_facts(2.0, 32768 - 3000))
    assert a.level is AlertLevel.WARNING


def test_small_context_does_not_warn_at_the_start() -> None:
    eng = AlertEngine()
    assert eng.update(ctx_facts(0.0, 500, n_ctx=4096)) == ()
    assert codes(eng.update(ctx_facts(1.0, 2500, n_ctx=4096))) == ["ctx_full_soon"]


def test_thresholds_are_overridable() -> None:
    eng = AlertEngine(AlertThresholds(ctx_warn_tokens=10_000, ctx_warn_seconds=0))
    assert codes(eng.update(ctx_facts(0.0, 32768 - 9000, decode=None))) == ["ctx_full_soon"]
    assert AlertEngine().update(ctx_facts(0.0, 32768 - 9000, decode=None)) == ()


def vram(t: float, secs: float | None, free: int = 2 * GIB) -> AlertFacts:
    g = GpuVramFacts(index=0, name="RTX 4090", vram_free_bytes=free, vram_total_bytes=24 * GIB,
                     seconds_until_full=secs, free_drop_bytes=int(1.2 * GIB),
                     other_processes_growth_bytes=int(1.2 * GIB), window_s=60.0)
    return AlertFacts(t_monotonic=t, gpus=(g,))


def test_vram_full_message_and_levels() -> None:
    eng = AlertEngine()
    assert eng.update(vram(0.0, 400.0)) == ()
    (a,) = eng.update(vram(1.0, 100.0))
    assert a.level is AlertLevel.WARNING
    assert a.message.startswith("VRAM full in ≈ 2 min on") and "another program took 1.20 GiB in the last minute" in \
        a.message
    assert "GPU 0 (RTX 4090)" in a.message
    (a,) = eng.update(vram(2.0, 45.0))
    assert a.level is AlertLevel.CRITICAL and a.message.startswith("VRAM full in 45 s on")


def test_vram_noisy_trend_does_not_flap() -> None:
    eng = AlertEngine()
    rng = random.Random(3)
    raises = 0
    for i in range(300):
        eng.update(vram(float(i), 180.0 + rng.uniform(-60, 60)))
        raises += len(eng.last_raised)
    assert raises == 1


def test_spill_partial_offload_metrics_and_advice_messages() -> None:
    eng = AlertEngine()
    f = AlertFacts(t_monotonic=0.0, backend=by_name("llama-server"), kv_host_fraction=0.25, kv_host_bytes=2 * GIB,
                   kv_host_via="PCIe", kv_host_cap_tok_s=6.2, metrics_enabled=False,
                   advice=(CacheAdvice("q8_0", "q8_0", "-ctk q8_0 -ctv q8_0", int(3.1 * GIB), 51.4, 38.0),
                           CacheAdvice("q4_0", "q4_0", "-ctk q4_0 -ctv q4_0", int(4.5 * GIB), 60.0, 38.0)))
    alerts = eng.update(f)
    by = {a.code: a for a in alerts}
    assert alerts[0].level is AlertLevel.CRITICAL
    assert by["kv_in_host"].message.startswith("KV cache in host RAM (2.00 GiB, 25%): decode capped at ~6 tok/s "
                                               "by PCIe")
    assert by["metrics_disabled"].message.startswith("/metrics is disabled: start llama-server with --metrics")
    assert by["metrics_disabled"].level is AlertLevel.INFO
    assert by["kv_cache_advice"].message == ("`-ctk q8_0 -ctv q8_0` would give ~51 tok/s here (~38 now) and free "
                                             "3.10 GiB")


def test_advice_that_keeps_the_speed_says_so() -> None:
    """A gain under a whole tok/s (a CPU at 9.7 tok/s whose KV is a small part of its reads) is no "~10 tok/s" to
    read beside a header that says 10: the advice keeps the speed and frees the memory; without today's speed it
    names the speed alone."""
    def advised(tok_s: float, now: float | None) -> str:
        f = AlertFacts(t_monotonic=0.0, backend=by_name("llama-server"),
                       advice=(CacheAdvice("q8_0", "q8_0", "-ctk q8_0 -ctv q8_0", int(1.88 * GIB), tok_s, now),))
        (a,) = [x for x in AlertEngine().update(f) if x.code == "kv_cache_advice"]
        return a.message

    assert advised(10.3, 9.7) == "`-ctk q8_0 -ctv q8_0` would keep ~10 tok/s here and free 1.88 GiB"
    assert advised(10.6, 9.7) == "`-ctk q8_0 -ctv q8_0` would give ~11 tok/s here (~10 now) and free 1.88 GiB"
    assert advised(10.6, None) == "`-ctk q8_0 -ctv q8_0` would give ~11 tok/s here and free 1.88 GiB"


def test_advice_and_the_spill_fix_follow_what_is_known_of_the_cache_type() -> None:
    adv = CacheAdvice("q8_0", "q8_0", "-ctk q8_0 -ctv q8_0", int(7.5 * GIB), None, None, assumed_type="f16",
                      assumed_why="kvmon cannot see the server's -ctk/-ctv")
    (a,) = AlertEngine().update(AlertFacts(t_monotonic=0.0, backend=by_name("llama-server"), advice=(adv,)))
    assert a.message == ("If your KV cache is f16 (kvmon cannot see the server's -ctk/-ctv), `-ctk q8_0 -ctv q8_0` "
                         "would free 7.50 GiB")

    def fix(**kw: object) -> str:
        f = AlertFacts(t_monotonic=0.0, kv_host_fraction=0.5, kv_host_bytes=GIB, **kw)  # type: ignore[arg-type]
        (alert,) = AlertEngine().update(f)
        return alert.message.split("; ", 1)[1]

    # the smaller type is the analysis's one rule (the types the user lets it suggest: q8_0 unless asked)
    assert fix(backend=by_name("llama-server"), kv_type="f16", smaller_kv_type="q8_0") == \
        "free VRAM, lower -c or use a smaller cache type (`-ctk q8_0 -ctv q8_0`)"
    assert fix(backend=by_name("llama-server"), kv_type="q8_0") == "free VRAM, lower -c"  # no q4_0 unasked
    assert fix(backend=by_name("llama-server"), kv_type="q8_0", smaller_kv_type="q4_0") == \
        "free VRAM, lower -c or use a smaller cache type (`-ctk q4_0 -ctv q4_0`)"
    assert fix(backend=by_name("llama-server"), kv_type="q4_0") == "free VRAM, lower -c"
    assert fix(backend=by_name("llama-server"), kv_type="f16", kv_type_assumed=True, smaller_kv_type="q8_0") == \
        "free VRAM, lower -c, or, if your cache is f16, use `-ctk q8_0 -ctv q8_0`"
    assert fix(backend=by_name("ollama"), kv_type="f16", smaller_kv_type="q8_0") == \
        "free VRAM, lower num_ctx or use a smaller cache type " \
        "(`OLLAMA_KV_CACHE_TYPE=q8_0 OLLAMA_FLASH_ATTENTION=1`)"
    assert fix(backend=by_name("vllm"), kv_type="f16", smaller_kv_type="q8_0") == "free VRAM, lower --max-model-len"


def test_partial_offload_ollama() -> None:
    eng = AlertEngine()
    f = AlertFacts(t_monotonic=0.0, backend=by_name("ollama"), weights_host_bytes=int(3.2 * GIB),
                   weight_bytes=int(18.5 * GIB), weights_host_cap_tok_s=9.4)
    (a,) = eng.update(f)
    assert a.code == "weights_in_host" and a.level is AlertLevel.WARNING
    assert "3.20 GiB of 18.5 GiB (17%) on the CPU; decode capped at ~9 tok/s" in a.message
    assert "num_ctx" in a.message


def test_connection_alert_needs_a_lasting_failure() -> None:
    eng = AlertEngine()

    def gone(t: float, kind: str = "unreachable") -> AlertFacts:
        return AlertFacts(t_monotonic=t, connected=False, connection_failure=kind, connection_reason="refused")

    assert eng.update(gone(0.0)) == ()
    assert eng.update(gone(2.0)) == ()
    (a,) = eng.update(gone(3.5))  # one cause, one alert: the count and the duration in it
    assert a.code == "connection" and a.level is AlertLevel.CRITICAL and "3 failed polls over 3.5 s" in a.message
    assert a.message.startswith("Server gone — reconnecting: refused")
    timeout = AlertEngine()
    timeout.update(gone(0.0, "timeout"))
    (a,) = timeout.update(gone(4.0, "timeout"))
    assert a.level is AlertLevel.WARNING and a.message.startswith("Server not answering")
    eng2 = AlertEngine()
    (a,) = eng2.update(gone(0.0, "auth_rejected"))
    assert a.level is AlertLevel.CRITICAL and "API key rejected" in a.message
    # loading is a state, not an alert
    assert AlertEngine().update(gone(10.0, "model_loading")) == ()


def test_unknown_facts_do_not_alert() -> None:
    eng = AlertEngine()
    assert eng.update(AlertFacts(t_monotonic=0.0)) == ()
    # an alert held through a poll where its fact is unknown keeps its last words
    eng.update(ctx_facts(1.0, 31000))
    (a,) = eng.update(AlertFacts(t_monotonic=2.0))
    assert a.code == "ctx_full_soon" and "Context full" in a.message
    eng.reset()
    assert eng.update(AlertFacts(t_monotonic=3.0)) == ()


def test_the_host_prompt_cache_is_said_when_it_may_outgrow_the_ram_available() -> None:
    """llama-server keeps idle conversations in host RAM up to --cache-ram (8 GiB by default): advice with a limit
    that fits when that is more than the RAM available; quiet once it fits; Ollama's child takes the variable."""
    eng = AlertEngine(AlertThresholds(min_hold_s=0.0))

    def alerts(limit: int | None, avail: int | None, backend: str = "llama-server", t: float = 0.0) -> list[str]:
        f = AlertFacts(t_monotonic=t, backend=by_name(backend),
                      prompt_cache_limit_bytes=limit, ram_available_bytes=avail)
        return [a.message for a in eng.update(f) if a.code == "prompt_cache_ram"]

    msgs = alerts(8 * GIB, 5 * GIB)
    assert msgs == ["The host prompt cache may grow to 8.00 GiB (--cache-ram) with 5.00 GiB of RAM available: "
                    "`--cache-ram 2560` keeps it within (0 turns it off)"]
    assert alerts(8 * GIB, 32 * GIB, t=1.0) == []  # fits
    assert alerts(-1, 64 * GIB, t=2.0)[0].startswith("The host prompt cache has no size limit (--cache-ram -1)")
    assert alerts(0, 1 * GIB, t=3.0) == []  # off
    assert alerts(None, 1 * GIB, t=4.0) == [] and alerts(8 * GIB, None, t=5.0) == []  # unknown: nothing said
    assert "LLAMA_ARG_CACHE_RAM=" in alerts(8 * GIB, 2 * GIB, backend=by_name("ollama"), t=6.0)[0]
    held = AlertEngine(AlertThresholds(min_hold_s=0.0))
    f = AlertFacts(t_monotonic=0.0, backend=by_name("llama-server"), prompt_cache_limit_bytes=8 * GIB,
                   ram_available_bytes=7 * GIB)
    assert [a.level for a in held.update(f)] == [AlertLevel.INFO]
    # raised: it clears only once the limit fits in 80 % of the RAM available (no flapping at the edge)
    again = AlertFacts(t_monotonic=1.0, backend=by_name("llama-server"), prompt_cache_limit_bytes=8 * GIB,
                       ram_available_bytes=int(8.5 * GIB))
    assert [a.code for a in held.update(again)] == ["prompt_cache_ram"]


@pytest.mark.parametrize(("backend", "knob"), [("llama-server", "-c"), (None, "context size"), ("ollama", "num_ctx"),
                                               ("vllm", "--max-model-len"), ("lmstudio", "context length")])
def test_context_full_names_the_backends_own_setting(backend: str | None, knob: str) -> None:
    """The fix for a full context is said in the words of the server that has it (never -c to an Ollama user)."""
    for ctx, n_ctx in ((7_900, 8_192), (8_192, 8_192)):
        f = AlertFacts(t_monotonic=0.0, backend=by_name(backend), n_ctx=n_ctx, context_tokens=ctx,
                       tokens_until_ctx_full=n_ctx - ctx)
        (a,) = AlertEngine().update(f)
        assert a.code == "ctx_full_soon" and knob in a.message, a.message
        assert backend in (None, "llama-server") or "-c" not in a.message.split(), a.message


def test_the_cpu_line_stands_while_the_context_grows() -> None:
    """The CPU-only line names its ceiling to two figures: a ceiling that falls by a few tokens per second as the
    context grows does not rewrite the line (and re-lay the alerts panel) every poll."""
    def line(cap: float) -> str:
        f = AlertFacts(t_monotonic=0.0, backend=by_name("llama-server"), cpu_only=True, cpu_only_cap_tok_s=cap,
                       host_bandwidth_bytes_per_s=24e9, host_bandwidth_source="measured")
        (a,) = AlertEngine().update(f)
        return a.message

    assert line(9165.0) == line(9154.0)
    assert "the ceiling is ~9,200 tok/s at this depth" in line(9165.0)
    assert "~5.3 tok/s" in line(5.33) and line(5.33) != line(4.1)


def test_the_cpu_demos_advice_reads_against_its_speed() -> None:
    """On the DDR5 CPU demo q8_0 gains under a whole tok/s at first: "keep ~11", while decoding and while idle
    (today's speed then being the forecast); deeper, where the gain shows, "give ~11 tok/s here (~10 now)"."""
    from kvmon.app.demo import demo_session, step_demo

    session = demo_session("cpu-ddr5", None, start_at_s=100, stepped=True)
    try:
        said = {(s.activity.value, a.message) for s in step_demo(session, 40.0, 2.0) for a in s.alerts
                if a.code == "kv_cache_advice"}
    finally:
        session.close()
    keep = "`-ctk q8_0 -ctv q8_0` would keep ~11 tok/s here and free 1.88 GiB"
    assert ("decoding", keep) in said and ("idle", keep) in said
    assert ("decoding", "`-ctk q8_0 -ctv q8_0` would give ~11 tok/s here (~10 now) and free 1.88 GiB") in said
