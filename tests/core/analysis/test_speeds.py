"""Idle, decoding, loading and unknown as one typed value decided in the analysis, not read back from text."""

from __future__ import annotations

from dataclasses import replace

from kvmon.core.analysis.speeds import Speeds, activity
from kvmon.core.recorder import snapshot_from_dict, snapshot_to_dict
from kvmon.core.snapshot import Activity, Connection, ConnectionStatus, Snapshot

UP = Connection(ConnectionStatus.CONNECTED)


def test_the_analysis_decides_the_activity_once() -> None:
    assert activity(Speeds(decode=31.0), ConnectionStatus.CONNECTED) is Activity.DECODING
    assert activity(Speeds(idle=True), ConnectionStatus.CONNECTED) is Activity.IDLE
    assert activity(Speeds(), ConnectionStatus.CONNECTED) is Activity.UNKNOWN  # e.g. no counters at all
    assert activity(Speeds(), ConnectionStatus.LOADING) is Activity.LOADING




def test_a_recording_made_before_the_activity_existed_reads_the_same() -> None:
    base = Snapshot(seq=1, t_monotonic=1.0, t_wall=1_700_000_000.0, connection=UP,
                    reasons={"decode_tok_s": "idle: no tokens generated since the last poll"})
    old = snapshot_to_dict(base)
    old.pop("activity")
    assert snapshot_from_dict(old).activity is Activity.IDLE
    old_fast = snapshot_to_dict(replace(base, decode_tok_s=40.0, reasons={}))
    old_fast.pop("activity")
    assert snapshot_from_dict(old_fast).activity is Activity.DECODING
    # a new recording keeps what the analysis decided
    assert snapshot_from_dict(snapshot_to_dict(replace(base, activity=Activity.UNKNOWN))).activity is Activity.UNKNOWN


def test_a_request_with_no_decode_speed_yet_is_processing_not_idle() -> None:
    """A slot at work (its prompt, or the first poll of its decoding) gives no decode rate yet: that is not idleness.
    Without slots, a running request says the same; with neither, the rates decide."""
    from kvmon.core.analysis.speeds import PROCESSING_REASON, busy, speeds
    from kvmon.core.rates import RateSample
    from kvmon.core.readings import ServerReading, SlotReading

    working = ServerReading(t_monotonic=1.0, t_wall=1.0, backend="llama-server", url="http://x",
                            slots=(SlotReading(id=0, n_ctx=4096, processing=True, context_tokens=3748),),
                            live_rate_source="slots")
    out, notes = speeds(RateSample(decode_tok_s=None, prefill_tok_s=2048.0), working)
    assert out.processing and not out.idle and activity(out, ConnectionStatus.CONNECTED) is Activity.PROCESSING
    assert notes.reasons["decode_tok_s"] == PROCESSING_REASON
    quiet = replace(working, slots=(SlotReading(id=0, n_ctx=4096, processing=False, context_tokens=3748),))
    out, notes = speeds(RateSample(decode_tok_s=None, prefill_tok_s=None), quiet)
    assert out.idle and not out.processing and notes.reasons["decode_tok_s"].startswith("idle")
    no_slots = replace(working, slots=())
    assert busy(replace(no_slots, requests_running=1), None, None)
    assert not busy(replace(no_slots, requests_running=0), None, 900.0)  # the server's own count decides
    assert busy(no_slots, None, 900.0) and not busy(no_slots, None, None)
    # ... but a prompt counted since the last poll, with nothing that says a request still runs, is not "processing"
    counted, _ = speeds(RateSample(decode_tok_s=None, prefill_tok_s=900.0), no_slots)
    assert counted.idle and not counted.processing
    # no live counters at all: unknown, even with a slot at work (nothing says why there is no rate but that)
    blind = replace(working, live_rate_source=None, live_rate_unavailable_reason="the /slots endpoint is off")
    assert activity(speeds(RateSample(decode_tok_s=None, prefill_tok_s=None), blind)[0],
                    ConnectionStatus.CONNECTED) is Activity.UNKNOWN


