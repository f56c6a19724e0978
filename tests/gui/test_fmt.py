"""The header's headline words: what a working server does, read from the activity and never from the reason text."""

from __future__ import annotations

import math
from dataclasses import replace

from kvmon.core.snapshot import Activity, Connection, ConnectionStatus, Snapshot
from kvmon.core.verdict import decide
from kvmon.gui.fmt import DASH, hero, percent_value

UP = Connection(ConnectionStatus.CONNECTED)


def test_the_header_reads_the_activity_not_the_reason_text() -> None:
    # a reason that happens to start with "idle" does not make the header say idle: the typed value does
    s = Snapshot(seq=1, t_monotonic=1.0, t_wall=1.0, connection=UP, activity=Activity.UNKNOWN,
                 reasons={"decode_tok_s": "idle-looking words from a source"})
    assert decide(s).state == "Connected" and hero(s).number == "— tok/s"
    idle = replace(s, activity=Activity.IDLE, reasons={"decode_tok_s": "no tokens generated since the last poll"})
    assert decide(idle).state == "Idle" and hero(idle).number == "— tok/s"  # the big number is only ever a speed
    loading = replace(s, activity=Activity.LOADING, connection=Connection(ConnectionStatus.LOADING))
    assert decide(loading).state == "Loading" and hero(loading).against == "no reply measured yet"


def test_the_header_says_what_a_working_server_does() -> None:
    s = Snapshot(seq=1, t_monotonic=1.0, t_wall=1.0, connection=UP, activity=Activity.PROCESSING,
                 ceiling_tok_s=56.0, prefill_tok_s=2048.0)
    h = hero(s)
    assert (h.number, h.against, h.prompt, h.share) == ("— tok/s", "no reply measured yet · ceiling 56.0 tok/s here",
                                                        "prompt 2,048 tok/s", "")
    assert decide(s).sentence == "Reading a prompt at 2,048 tok/s"
    started = decide(replace(s, prefill_tok_s=None))  # "busy" means GPU utilisation or nothing
    assert started.sentence == "A request started: its speed shows at the next poll" and "busy" not in started.state


def test_a_percent_reads_as_one_and_an_unknown_one_as_a_dash() -> None:
    assert percent_value(72.4) == "72%"
    assert [percent_value(v) for v in (None, math.nan, math.inf)] == [DASH] * 3
