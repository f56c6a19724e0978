"""The sweep's plan, table and identity: the depths, the cost said before it starts, each refusal with its reason, the
table's columns, a sweep file read back (and one that is not), and what makes two configurations differ."""

from __future__ import annotations

import pytest

from kvmon.core.backend import Backend
from kvmon.core.snapshot import (
    Activity,
    Alert,
    AlertLevel,
    Connection,
    ConnectionStatus,
    HostView,
    ModelView,
    SlotView,
    Snapshot,
)
from kvmon.core.sweep import StepTiming, plan_sweep, rows_of
from kvmon.core.sweep_table import from_json, table_lines, to_json

LLAMA = Backend("llama-server", context_setting="-c", flash_attention_setting=" -fa on")
MIB = 1024 * 1024


def _snap(n_ctx: int = 32768, **kw: object) -> Snapshot:
    model = ModelView(name="m", n_ctx=n_ctx, kv_bytes_per_token=128 * 1024.0, kv_allocated_bytes=n_ctx * 128 * 1024)
    base = {"seq": 1, "t_monotonic": 0.0, "t_wall": 0.0, "connection": Connection(ConnectionStatus.CONNECTED),
            "model": model, "slots": (SlotView(0, n_ctx, 0, False), SlotView(1, n_ctx, 900, False)),
            "ceiling_curve": ((0, 100.0), (n_ctx, 50.0))}
    base.update(kw)
    return Snapshot(**base)  # type: ignore[arg-type]


def test_the_depths_grow_evenly_from_an_empty_conversation_and_the_cost_is_said() -> None:
    plan = plan_sweep(_snap(), LLAMA, 8192, 8, 64)
    assert plan.refusal is None
    assert plan.depths == (1, 1024, 2048, 3072, 4096, 5120, 6144, 7168, 8192)
    assert plan.slot == 0, "the idle slot holding the least"
    lines = plan.cost_lines(prefill_tok_s=4096.0, decode_tok_s=64.0)
    assert lines[0].startswith("9 depths from 1 to 8,192 tokens, 64 generated at each: 8,192 prompt tokens")
    assert lines[1].startswith("11 s at the prefill rate measured first (4,096 tok/s")  # 2 s + 9 × 1 s
    assert lines[2] == "KV cache at the deepest depth: up to 1.01 GiB, within the 4.00 GiB the server reserved at " \
                       "load: it fits"
    deflt = plan_sweep(_snap(), LLAMA)
    assert deflt.deepest == 32768 - 64, "by default as deep as the slot allows"


def test_a_slot_holding_a_conversation_is_said_to_be_replaced() -> None:
    s = _snap(slots=(SlotView(0, 32768, 5000, False),))
    plan = plan_sweep(s, LLAMA, 4096)
    assert "it replaces what slot 0 holds (5,000 tokens of an earlier conversation)" in plan.notes


@pytest.mark.parametrize(("snap", "words"), [
    (_snap(8192), "a sweep to 8,192 tokens needs 8,256 tokens of context (8,192 + 64 generated) and the server's "
                  "slot holds 8,192: sweep to 8,128 or less, or give the server more context (-c)"),
    (_snap(slots=(SlotView(0, 32768, 3000, True),)), "a reply is being generated (slot 0)"),
    (_snap(slots=(), activity=Activity.DECODING), "the server is generating a reply"),
    (_snap(alerts=(Alert(AlertLevel.CRITICAL, "kv_in_host", "KV cache in host RAM (616 MiB, 19%)"),)),
     "the KV cache already spills out of the device's memory (KV cache in host RAM (616 MiB, 19%))"),
    (_snap(host=HostView(kv_in_host_bytes=4096 * MIB, ram_available_bytes=100 * MIB), kv_in_use_bytes=0),
     "takes 1.01 GiB more of host RAM, where 100 MiB is free: the machine would swap"),
    (_snap(connection=Connection(ConnectionStatus.UNREACHABLE, "cannot connect")),
     "the server could not be read: cannot connect"),
])
def test_each_refusal_says_why(snap: Snapshot, words: str) -> None:
    plan = plan_sweep(snap, LLAMA, 8192)
    assert plan.refusal is not None and words in plan.refusal


def test_a_spilled_curve_may_be_asked_for_on_purpose() -> None:
    s = _snap(alerts=(Alert(AlertLevel.CRITICAL, "kv_in_host", "KV cache in host RAM"),))
    assert plan_sweep(s, LLAMA, 8192).refusal is not None
    assert plan_sweep(s, LLAMA, 8192, allow_spill=True).refusal is None
    # weights partly on the CPU on purpose (a partial offload) are a configuration, not a spill
    partial = _snap(alerts=(Alert(AlertLevel.WARNING, "weights_in_host", "40% of the weights in host RAM"),))
    assert plan_sweep(partial, LLAMA, 8192).refusal is None


def test_the_table_has_the_seeds_columns_and_reads_back() -> None:
    steps = [(StepTiming(1, 1, 0.001, 64, 80.0, "server"), None, 1),
             (StepTiming(16384, 1024, 1.0, 64, 60.0, "server"), 1024.0, 1024),
             (StepTiming(32704, 1024, 1.0, 64, 52.0, "server"), 1024.0, 1024)]
    rows = rows_of(steps, ((0, 100.0), (32768, 50.0)))
    assert [(r.depth_tokens, r.share_of_first, round(r.ceiling_tok_s or 0), r.efficiency and round(r.efficiency, 3))
            for r in rows] == [(1, 1.0, 100, 0.8), (16384, 0.75, 75, 0.8), (32704, 0.65, 50, None)]
    # above the ceiling: one of the ceiling's inputs is wrong, so no efficiency is given
    assert table_lines(rows)[0].split() == ["depth", "decode", "tok/s", "%", "of", "first", "ceiling", "tok/s",
                                            "efficiency", "prefill", "tok/s"]
    from kvmon.core.sweep import SweepResult

    r = SweepResult("http://127.0.0.1:1", "llama-server", "b1", "m", None, 64, rows, ((0, 100.0),))
    back = from_json(to_json(r))
    assert back.rows == rows and back.ceiling_curve == ((0, 100.0),)
