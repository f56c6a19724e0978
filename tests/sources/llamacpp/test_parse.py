"""llama-server's ``/metrics`` read by prometheus_client's parser: on every captured page, the counters kvmon has
always read from it (``fixtures/llama-server-metrics.counters.json``: each page's counters, the values left out,
or the page refused), the one gauge kept, and speculative decoding's acceptance by draft position."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvmon.sources.llamacpp.parse import MetricsTextError, parse_metrics

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
EXPECTED = json.loads((FIXTURES / "llama-server-metrics.counters.json").read_text(encoding="utf-8"))
PAGES = sorted(str(p.relative_to(FIXTURES)) for p in (FIXTURES / "llama-server").rglob("metrics*.txt")
               if not p.name.endswith(".headers.txt"))


def test_every_captured_page_has_its_counters_written_down() -> None:
    assert PAGES == sorted(EXPECTED) and len(PAGES) >= 40


@pytest.mark.parametrize("page", PAGES)
def test_every_captured_page_reads_the_counters_it_always_did(page: str) -> None:
    rejected: list[str] = []
    try:
        got = {"counters": parse_metrics((FIXTURES / page).read_text(encoding="utf-8"), rejected),
               "rejected": rejected}
    except MetricsTextError:
        got = {"error": "MetricsTextError"}
    assert got == EXPECTED[page]


def test_counters_are_read_and_gauges_dropped_but_the_requests_being_processed() -> None:
    m = parse_metrics((FIXTURES / "llama-server" / "metrics.generating-with-deferred.txt").read_text())
    assert "requests_deferred" not in m and m["n_decode_total"] > 0
    assert m["requests_processing"] == 1  # the one gauge kept: whether a request runs (where /slots is not read)
    idle = parse_metrics((FIXTURES / "llama-server" / "metrics.idle.txt").read_text())
    assert idle["requests_processing"] == 0 and "n_busy_slots_per_decode" not in idle


def test_a_page_that_is_not_prometheus_text_is_refused_and_a_bad_count_left_out_by_name() -> None:
    with pytest.raises(MetricsTextError):
        parse_metrics('{"error":{"code":501,"message":"This server does not support metrics endpoint."}}')
    rejected: list[str] = []
    page = "# TYPE llamacpp:n_decode_total counter\nllamacpp:n_decode_total 1e400\n" \
           "# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total -3\n" \
           "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 12\n"
    assert parse_metrics(page, rejected) == {"prompt_tokens_total": 12.0}
    assert rejected == ["n_decode_total", "tokens_predicted_total"]
