"""Idle, decoding, loading and unknown as one typed value decided in the analysis, not read back from text."""

from __future__ import annotations

from dataclasses import replace

from kvmon.core.analysis.speeds import Speeds, activity
from kvmon.core.recorder import snapshot_from_dict, snapshot_to_dict
from kvmon.core.snapshot import Activity, Connection, ConnectionStatus, Snapshot
from kvmon.gui.fmt import speed_words

UP = Connection(ConnectionStatus.CONNECTED)


def test_the_analysis_decides_the_activity_once() -> None:
    assert activity(Speeds(decode=31.0), ConnectionStatus.CONNECTED) is Activity.DECODING
    assert activity(Speeds(idle=True), ConnectionStatus.CONNECTED) is Activity.IDLE
    assert activity(Speeds(), ConnectionStatus.CONNECTED) is Activity.UNKNOWN  # e.g. no counters at all
    assert activity(Speeds(), ConnectionStatus.LOADING) is Activity.LOADING


def test_the_header_reads_the_activity_not_the_reason_text() -> None:
    # a reason that happens to start with "idle" does not make the header say idle: the typed value does
    s = Snapshot(seq=1, t_monotonic=1.0, t_wall=1.0, connection=UP, activity=Activity.UNKNOWN,
                 reasons={"decode_tok_s": "idle-looking words from a source"})
    assert not speed_words(s).idle and speed_words(s).decode == "—"
    idle = replace(s, activity=Activity.IDLE, reasons={"decode_tok_s": "no tokens generated since the last poll"})
    assert speed_words(idle).idle and speed_words(idle).decode == "idle"
    loading = replace(s, activity=Activity.LOADING, connection=Connection(ConnectionStatus.LOADING))
    assert speed_words(loading).loading and speed_words(loading).against == ""


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
