"""The /kvmon/stats document: the proxy writes exactly its schema, and the Ollama source's reader reads it back."""

from __future__ import annotations

import pytest

from kvmon.core.readings import SourceError
from kvmon.proxy import stats
from kvmon.proxy.meter import Meter


def _finished_ollama_meter() -> Meter:
    m = Meter(id=7, method="POST", path="/api/chat", started_unix=1000.0, started_mono=0.0, model="llama3.1:8b")
    m.set_response(200, "application/x-ndjson", None)
    m.feed(b'{"message":{"content":"a"},"done":false}\n{"message":{"content":"b"},"done":false}\n', 1.0)
    m.feed(b'{"done":true,"prompt_eval_count":900,"prompt_eval_duration":300000000,'
           b'"eval_count":40,"eval_duration":1000000000}\n', 2.0)
    m.finish_body(2.0)
    m.finished_unix = 1002.0
    return m


def test_records_and_the_document_hold_exactly_the_schema() -> None:
    m = _finished_ollama_meter()
    rec = stats.finished_record(m, "ollama", (0, 33, 0))
    live = stats.in_flight_record(m, now_mono=3.0)
    assert tuple(rec) == stats.RECENT_FIELDS and tuple(live) == stats.IN_FLIGHT_FIELDS
    doc = stats.document(upstream="http://127.0.0.1:11434", upstream_kind="ollama", upstream_version="0.33.0",
                         listen="http://127.0.0.1:11435", started_unix=900.0, now_unix=1004.0,
                         totals={"requests": 1}, in_flight=[live], recent=[rec])
    assert tuple(doc) == stats.DOCUMENT_FIELDS and tuple(doc["totals"]) == stats.TOTALS_FIELDS
    assert doc["totals"]["requests"] == 1 and doc["totals"]["aborted"] == 0


def test_what_the_proxy_writes_the_source_reads() -> None:
    m = _finished_ollama_meter()
    rec = stats.finished_record(m, "ollama", (0, 33, 0))
    assert rec["decode_tok_s"] == pytest.approx(40.0) and rec["prompt_tok_s"] is None
    assert rec["prompt_tok_s_reason"] == stats.CACHED_PROMPT_REASON and rec["context_tokens"] == 940
    live = stats.in_flight_record(m, now_mono=3.0)
    doc = stats.document(upstream="http://127.0.0.1:11434", upstream_kind="ollama", upstream_version="0.33.0",
                         listen="http://127.0.0.1:11435", started_unix=900.0, now_unix=1004.0, totals={},
                         in_flight=[live], recent=[rec])
    view = stats.parse_stats(doc, t_monotonic=50.0, t_wall=1004.0)
    assert view.upstream == "http://127.0.0.1:11434" and view.last_model == "llama3.1:8b"
    assert view.last is not None and view.last.t_end == pytest.approx(48.0)  # finished 2 s before now
    assert view.last.predicted_tokens == 40 and view.last.predicted_seconds == pytest.approx(1.0)
    assert view.last.prompt_tokens is None and view.last_prefill_reason == stats.CACHED_PROMPT_REASON
    assert view.last.context_tokens == 940
    (stream,) = view.in_flight
    assert (stream.id, stream.model, stream.tokens_so_far) == (7, "llama3.1:8b", 2)


def test_an_older_ollama_gives_its_prefill_rate_and_an_unknown_one_withholds_it() -> None:
    old = stats.finished_record(_finished_ollama_meter(), "ollama", (0, 29, 1))
    assert old["prompt_tok_s"] == pytest.approx(3000.0) and old["context_tokens"] is None
    unknown = stats.finished_record(_finished_ollama_meter(), None, None)
    assert unknown["prompt_tok_s"] is None and unknown["prompt_tok_s_reason"] == stats.UNKNOWN_VERSION_REASON


@pytest.mark.parametrize("body", [None, [], {"kvmon_proxy": 2}, {"hello": 1}])
def test_anything_else_is_not_a_stats_document(body: object) -> None:
    with pytest.raises(SourceError, match="not a kvmon proxy document"):
        stats.parse_stats(body, 0.0, 0.0)


def test_a_prompt_changes_words_read_back_as_plain_text() -> None:
    """A document from whatever answers on the proxy's port: its words are shown with control characters as carets
    and bidirectional overrides removed, as every server-supplied text is."""
    section = {"changes": [{"sentence": "system message changed\x1b[2J at character 40\u202e", "fix": "keep\x07 it",
                            "message_index": 0, "role": "sys\ntem", "offset": 40, "change": "timestamp", "count": 2,
                            "first_unix": 1.0, "last_unix": 2.0, "reread_tokens": 100, "reread_seconds": 0.5}]}
    (c,) = stats.prompt_changes(section)
    assert (c.sentence, c.fix, c.role) == ("system message changed^[[2J at character 40", "keep^G it", "sys^Jtem")
