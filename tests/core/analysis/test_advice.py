"""Cache type advice from the state: the cheaper KV type, the VRAM it frees and the speed it would give here, with the
server's own flags; said as a condition when kvmon cannot see the cache type."""

from __future__ import annotations

from analysis_readings import GIB, FixedRates, ceiling_8b, gpus, reading

from kvmon.core.analysis import Analyzer
from kvmon.core.readings import ServerConfig
from kvmon.core.snapshot import AlertLevel


def test_cache_type_advice() -> None:
    s = Analyzer(rate_tracker=FixedRates(decode=60.0)).update(
        reading(ctx=16384, config=ServerConfig(n_ctx_total=32768, n_parallel=1, type_k="f16", type_v="f16",
                                               flash_attn="off")), gpus())
    (adv,) = [x for x in s.alerts if x.code == "kv_cache_advice"]
    freed = 4 * GIB - 32768 * 32 * 8 * 128 * 2 * 34 // 32
    kv_q8 = 16384 * 32 * 8 * 128 * 2 * 34 / 32
    tok_s = 60.0 * (1008e9 / (4.92e9 + kv_q8)) / ceiling_8b(16384)
    assert adv.message == f"`-ctk q8_0 -ctv q8_0 -fa on` would give ~{tok_s:.0f} tok/s here (~60 now) and free " \
        f"{freed / GIB:.2f} GiB"
    assert adv.level is AlertLevel.INFO


def test_cache_type_advice_on_an_assumed_cache_type_is_said_as_a_condition() -> None:
    """kvmon cannot see the cache type (no command line, log or setting): f16 is assumed, and the advice must not
    tell a server that may already run q8_0 to switch to q8_0 as a fact."""
    s = Analyzer(rate_tracker=FixedRates(decode=60.0)).update(
        reading(ctx=16384, config=ServerConfig(n_ctx_total=32768, n_parallel=1, flash_attn="on")), gpus())
    assert s.provenance["kv_type"] == "default"
    (adv,) = [x for x in s.alerts if x.code == "kv_cache_advice"]
    assert adv.message.startswith("If your KV cache is f16 (kvmon cannot see the server's -ctk/-ctv: give it the "
                                  "server's log with --log), `-ctk q8_0 -ctv q8_0` would ")
    known = Analyzer(rate_tracker=FixedRates(decode=60.0)).update(
        reading(ctx=16384, config=ServerConfig(n_ctx_total=32768, n_parallel=1, type_k="q8_0", type_v="q8_0",
                                               flash_attn="on")), gpus())
    advice = [x.message for x in known.alerts if x.code == "kv_cache_advice"]
    assert all("If your" not in m and "q8_0 -ctv q8_0" not in m for m in advice)
