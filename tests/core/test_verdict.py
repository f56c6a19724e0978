"""The verdict: one poll's headline decided from its Snapshot (level, state, sentence, cause), carried into the
``once --json`` document, the exporter's gauge and the recording; and the last decode speed the headline keeps while
nothing decodes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kvmon.core.analysis import Analyzer
from kvmon.core.connection import failure_snapshot
from kvmon.core.readings import (
    FailureKind,
    GpuSetReading,
    HostReading,
    ModelInfo,
    ServerConfig,
    ServerReading,
    SlotReading,
    SourceFailure,
)
from kvmon.core.recorder import Recorder, read_recording, snapshot_to_dict
from kvmon.core.report_json import snapshot_to_json
from kvmon.core.report_prometheus import snapshot_families
from kvmon.core.snapshot import (
    Activity,
    Alert,
    AlertLevel,
    CeilingSuspect,
    Connection,
    ConnectionStatus,
    Snapshot,
    VerdictLevel,
)
from kvmon.core.verdict import DecodeMemory, decide, decided
from kvmon.physics.presets import PRESETS
from kvmon.physics.shape import ModelShape
from kvmon.sources.backends import by_name

GIB = 1024**3
L27B = PRESETS["qwen3.5-27b"]


def snap(**kw: object) -> Snapshot:
    base: dict[str, object] = {"seq": 1, "t_monotonic": 100.0, "t_wall": 1.8e9,
                               "connection": Connection(ConnectionStatus.CONNECTED), "activity": Activity.IDLE}
    base.update(kw)
    return Snapshot(**base)  # type: ignore[arg-type]


def test_nothing_wrong_says_what_the_server_does() -> None:
    v = decide(snap(activity=Activity.DECODING, decode_tok_s=38.2, ceiling_tok_s=59.7, efficiency=0.64,
                    context_tokens=33_500))
    assert (v.level, v.state, v.cause) == (VerdictLevel.OK, "Decoding", "decoding")
    assert v.sentence == "64% of the memory-bus ceiling at 33.5K tokens"
    v = decide(snap(context_tokens=29_751, ceiling_tok_s=118.4))
    assert v.sentence == "Idle at 29.8K tokens: up to 118 tok/s there" and v.level is VerdictLevel.OK
    v = decide(snap(activity=Activity.PROCESSING, prefill_tok_s=6346.0))
    assert v.sentence == "Reading a prompt at 6,346 tok/s" and v.cause == "processing"
    # advice is a tip, never the headline
    advice = Alert(AlertLevel.INFO, "kv_cache_advice", "`-ctk q8_0 -ctv q8_0` would free 1.88 GiB")
    assert decide(snap(alerts=(advice,), context_tokens=100)).level is VerdictLevel.OK


def test_the_worst_condition_is_the_news() -> None:
    spill = Alert(AlertLevel.CRITICAL, "kv_in_host", "KV cache in host RAM (9.50 GiB, 59%) …",
                  headline="Spilled: 9.50 GiB of the KV cache in host RAM — capped at ~11 tok/s")
    part = Alert(AlertLevel.WARNING, "weights_in_host", "Model partly in host RAM …", headline="Partly on the CPU")
    ctx = Alert(AlertLevel.CRITICAL, "ctx_full_soon", "Context full in ~34 tokens …", headline="Context full in ~34")
    v = decide(snap(alerts=(part, ctx, spill)))
    assert (v.level, v.state, v.cause) == (VerdictLevel.CRITICAL, "Spilled", "kv_in_host")  # a spill before the rest
    assert v.sentence == spill.headline
    v = decide(snap(alerts=(part,)))
    assert (v.level, v.state, v.sentence) == (VerdictLevel.WARNING, "Partly on the CPU", "Partly on the CPU")


def test_a_server_that_cannot_be_read_says_what_is_wrong() -> None:
    s = failure_snapshot(SourceFailure(FailureKind.UNREACHABLE, "cannot connect to http://127.0.0.1:1 (Connection "
                                                                "refused)"), seq=1, t_monotonic=0.0, t_wall=1.8e9)
    assert s.verdict is not None
    assert (s.verdict.level, s.verdict.state, s.verdict.cause) == (VerdictLevel.CRITICAL, "Unreachable", "connection")
    assert s.verdict.sentence == ("Cannot connect to http://127.0.0.1:1 (Connection refused). Is the server running? "
                                  "kvmon once --list finds the servers on this machine")
    loading = failure_snapshot(SourceFailure(FailureKind.MODEL_LOADING, "qwen3-8b loading 42 %"), seq=1,
                               t_monotonic=0.0, t_wall=1.8e9)
    assert loading.verdict is not None and loading.verdict.level is VerdictLevel.INFO
    assert loading.verdict.sentence == "Loading qwen3-8b (42 %): its speed shows once it answers"
    # a connection that fails outranks an alert of its level held from before
    held = Alert(AlertLevel.CRITICAL, "kv_in_host", "…", headline="Spilled: …")
    assert decide(replace(s, alerts=(held,))).cause == "connection"


def test_an_uncertain_or_unknown_ceiling_is_said() -> None:
    v = decide(snap(activity=Activity.DECODING, decode_tok_s=11.0, ceiling_tok_s=10.9,
                    ceiling_suspect=CeilingSuspect("weights_read_per_token", "measured 11.0 …")))
    assert v.level is VerdictLevel.INFO
    assert v.sentence == ("Decoding at 11.0 tok/s, faster than the computed ceiling of 10.9 tok/s: the weights read "
                          "per token is likely wrong")
    v = decide(snap(activity=Activity.DECODING, decode_tok_s=40.0, reasons={"ceiling_tok_s": "GPU bandwidth unknown"}))
    assert v.sentence == "Decoding at 40.0 tok/s; the ceiling is unknown: GPU bandwidth unknown"


def test_the_last_speed_stays_and_the_one_before_a_reload_is_kept() -> None:
    mem = DecodeMemory()
    last, before = mem.update("m", 1, 70.0, 10.0, 1.8e9 + 10, 32_000, 70.0)
    assert last is not None and last.tok_s == 70.0 and before is None
    last, before = mem.update("m", 1, None, 20.0, 1.8e9 + 20, 32_100)  # idle: the last one stays, with its time
    assert last is not None and last.t_monotonic == 10.0 and last.context_tokens == 32_000 and before is None
    last, before = mem.update("m", 2, 7.0, 40.0, 1.8e9 + 40, 33_000)  # a reload began another regime
    assert last is not None and last.tok_s == 7.0 and before is not None and before.tok_s == 70.0
    last, before = mem.update("other", 3, None, 50.0, 1.8e9 + 50, None)  # another model: nothing of the first
    assert last is None and before is None


def reading(t: float, *, processing: bool = True) -> ServerReading:
    model = ModelInfo(name="Qwen3.5-27B-Q4_K_M.gguf", arch="qwen35", weight_bytes=L27B.weight_bytes,
                      shape=ModelShape.from_gguf(L27B.metadata))
    return ServerReading(t_monotonic=t, t_wall=1.8e9 + t, backend=by_name("llama-server"),
                         url="http://127.0.0.1:8080", model=model,
                         slots=(SlotReading(id=0, n_ctx=32768, context_tokens=8_000, processing=processing),),
                         total_slots=1, metrics_enabled=True, config=ServerConfig(n_ctx_total=32768, n_parallel=1))


class Rates:
    """The decode speeds a test wants, one per poll."""

    def __init__(self, *speeds: float | None) -> None:
        self.speeds = list(speeds)

    def update(self, r: ServerReading) -> object:
        from types import SimpleNamespace

        d = self.speeds.pop(0)
        return SimpleNamespace(decode_tok_s=d, prefill_tok_s=None, per_slot_decode_tok_s={0: d},
                               decode_rate_source="slots" if d is not None else None)


def test_a_speed_no_visible_device_could_give_means_a_device_kvmon_cannot_see() -> None:
    """No GPU read on the server's machine: the CPU guess holds until a speed says otherwise; then where the model
    lives and its ceiling are unknown with that reason, and no alert or advice stands on the guess."""
    none = GpuSetReading(t_monotonic=0.0, unavailable_reason="no NVIDIA GPU: the NVML library was not found")
    host = HostReading(t_monotonic=0.0, ram_total_bytes=64 * GIB, ram_available_bytes=40 * GIB,
                       host_bandwidth_bytes_per_s=35e9, host_bandwidth_source="measured")
    a = Analyzer(rate_tracker=Rates(None, 111.7, None))
    first = a.update(reading(0.0, processing=False), none, host)
    assert first.extra["placement"] == "no_gpu" and first.ceiling_tok_s is not None  # the guess, while idle
    s = a.update(reading(1.0), none, host)
    assert s.ceiling_tok_s is None and s.efficiency is None and s.ceiling_curve == () and s.ceiling_suspect is None
    assert "device kvmon cannot see" in s.reasons["placement"] and s.reasons["ceiling_tok_s"] == s.reasons["placement"]
    assert "111.7 tok/s" in s.reasons["placement"] and not s.host.in_ceiling
    assert not [x for x in s.alerts if x.code in ("cpu_only", "kv_in_host", "weights_in_host")]
    assert not [x for x in s.alerts if x.code == "kv_cache_advice" and "tok/s" in x.message]
    assert s.verdict is not None and s.verdict.level is VerdictLevel.INFO
    assert s.verdict.sentence == ("Decoding at 112 tok/s on a device kvmon cannot see: where the model runs and its "
                                  "ceiling are unknown")
    idle = a.update(reading(2.0, processing=False), none, host)  # idle again: the speed said it, it stays said
    assert idle.ceiling_tok_s is None and "device kvmon cannot see" in idle.reasons["placement"]
    assert idle.last_decode is not None and idle.last_decode.tok_s == 111.7



def test_a_reply_that_ended_between_polls_too_fast_for_the_cpu_means_a_device_kvmon_cannot_see() -> None:
    """A short reply can start and end between two polls, so kvmon never sees it decode: the server's counters time
    it, and the headline shows that speed as the last reply's. Beside it, a CPU ceiling it beats 50-fold would
    contradict it: the speed says the model runs on a device kvmon cannot see, as a speed seen live does."""
    none = GpuSetReading(t_monotonic=0.0, unavailable_reason="no NVIDIA GPU: the NVML library was not found")
    host = HostReading(t_monotonic=0.0, ram_total_bytes=64 * GIB, ram_available_bytes=40 * GIB,
                       host_bandwidth_bytes_per_s=35e9, host_bandwidth_source="measured")

    def counted(t: float, predicted: int, seconds: float) -> ServerReading:
        return replace(reading(t, processing=False), metrics={
            "prompt_seconds_total": 0.5, "prompt_tokens_total": 1_000.0,
            "tokens_predicted_seconds_total": seconds, "tokens_predicted_total": float(predicted)})

    a = Analyzer(rate_tracker=Rates(None, None, None))
    first = a.update(counted(0.0, 0, 0.0), none, host)
    assert first.extra["placement"] == "no_gpu" and first.ceiling_tok_s is not None
    s = a.update(counted(1.0, 224, 2.0), none, host)  # 224 tokens in 2.0 s: 112 tok/s, ended before this poll
    assert s.decode_tok_s is None and s.last_decode is not None and s.last_decode.tok_s == 112.0
    assert s.ceiling_tok_s is None and "device kvmon cannot see" in s.reasons["placement"]
    assert "112.0 tok/s" in s.reasons["placement"] and not s.host.in_ceiling
    assert not [x for x in s.alerts if x.code in ("cpu_only", "kv_in_host", "weights_in_host")]
    assert s.verdict is not None and s.verdict.sentence == "Idle at 8.00K tokens"  # no CPU ceiling beside 112 tok/s

def test_the_document_the_gauge_and_the_recording_carry_it(tmp_path: Path) -> None:
    spill = Alert(AlertLevel.CRITICAL, "kv_in_host", "KV cache in host RAM …", headline="Spilled: 9.50 GiB …")
    s = decided(snap(alerts=(spill,), t_monotonic=130.0))
    from kvmon.core.snapshot import LastDecode

    s = replace(s, last_decode=LastDecode(70.2, 118.0, 1.8e9 - 12, 32_000))
    doc = json.loads(json.dumps(snapshot_to_json(s)))
    assert doc["verdict"] == {"level": "critical", "state": "Spilled", "sentence": "Spilled: 9.50 GiB …",
                              "cause": "kv_in_host"}
    assert doc["last_decode"] == {"tok_s": 70.2, "t_wall": 1.8e9 - 12, "age_s": 12.0, "context_tokens": 32_000}
    gauge = {m.name: m for m in snapshot_families(s, server="http://127.0.0.1:8080")}["kvmon_verdict_level"]
    (sample,) = gauge.samples
    assert sample.value == 3 and sample.labels == {"server": "http://127.0.0.1:8080", "cause": "kv_in_host"}
    path = tmp_path / "r.jsonl"
    with Recorder(path) as rec:
        rec.record(s)
        old = snapshot_to_dict(s)
        del old["verdict"]  # a line recorded before the verdict was: decided when read
        with path.open("a") as fh:
            fh.write(json.dumps(old) + "\n")
    got = read_recording(path).snapshots
    assert [x.verdict for x in got] == [s.verdict, s.verdict]


@pytest.mark.parametrize("level", list(VerdictLevel))
def test_every_level_has_a_rank_in_order(level: VerdictLevel) -> None:
    assert [v.rank for v in VerdictLevel] == [0, 1, 2, 3] and VerdictLevel(level.value) is level
