"""llama-server's /metrics read by the fast path and by prometheus_client's parser: the same counters, always.

The fast path (``_plain_counters``) takes the plain pages llama-server writes and hands anything else to the full
parser; these tests hold the two to one answer on every captured page, on pages bent the ways a fast path could get
wrong, and on generated ones.
"""

from __future__ import annotations

import re

import pytest
from helpers_http import LLAMA_FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from kvmon.sources.llamacpp.parse import (
    MAX_LAYOUT_LINES,
    MetricsReader,
    MetricsTextError,
    _plain_counters,
    parse_metrics,
    parse_metrics_fully,
)

PAGES = sorted(p for p in LLAMA_FIXTURES.rglob("metrics*.txt") if not p.name.endswith(".headers.txt"))
GENERATING = (LLAMA_FIXTURES / "metrics.generating.txt").read_text()


def _both(text: str) -> tuple[object, object]:
    """What each path answers: (counters, rejected) or the error type."""
    answers = []
    for parse in (parse_metrics, parse_metrics_fully):
        rejected: list[str] = []
        try:
            answers.append((parse(text, rejected), rejected))
        except MetricsTextError:
            answers.append(MetricsTextError)
    return answers[0], answers[1]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_captured_page_reads_the_same_both_ways(page) -> None:
    text = page.read_text()
    fast, full = _both(text)
    assert fast == full
    if "# TYPE llamacpp:" in text:  # a real counters page takes the fast path
        assert _plain_counters(text) is not None


BENT = {
    "an escaped HELP text": GENERATING.replace("Number of prompt", "Number\\\\ of \\n prompt", 1),
    "a labelled sample whose value is not a number": GENERATING + '# TYPE x counter\nx{a="1"} abc\n',
    "a labelled counter": GENERATING + '# TYPE llamacpp:spec_x_total counter\nllamacpp:spec_x_total{position="0"} 3\n',
    "a label with an escaped quote": GENERATING + '# TYPE x counter\nx{a="q\\"b"} 1\n',
    "a sample named unlike its family": GENERATING + "# TYPE foo counter\nfoo_total 4\n",
    "an untyped sample": GENERATING + "bar 5\n",
    "a timestamp": GENERATING + "# TYPE baz counter\nbaz 6 1700000000000\n",
    "a duplicate TYPE": GENERATING + "# TYPE llamacpp:n_decode_total counter\nllamacpp:n_decode_total 1\n",
    "a value that is not a number": GENERATING + "# TYPE q counter\nq 0x10\n",
    "an underscore in the value": GENERATING + "# TYPE q counter\nq 1_0\n",
    "infinity and NaN": GENERATING + "# TYPE i counter\ni +Inf\n# TYPE n counter\nn NaN\n",
    "a negative count": GENERATING + "# TYPE neg counter\nneg -3\n",
    "a _created sample": GENERATING + "# TYPE c_created counter\nc_created 1.7e9\n",
    "a stray #TYPE": GENERATING + "#TYPE z counter\nz 1\n",
    "a bare TYPE": GENERATING + "# TYPE\n",
    "an unknown type": GENERATING + "# TYPE w weird\nw 1\n",
    "carriage returns": GENERATING.replace("\n", "\r\n"),
    "two spaces": GENERATING + "# TYPE s counter\ns  1\n",
    "a tab": GENERATING + "# TYPE t counter\nt\t1\n",
    "a gauge": GENERATING + "# TYPE g gauge\ng 9\n",
    "a comment": GENERATING + "# just a note\n",
    "empty braces": GENERATING + "# TYPE e counter\ne{} 4\n",
    "a counter whose _total form is declared too": GENERATING + "# TYPE a_total counter\n# TYPE a counter\na 1\n",
}


@pytest.mark.parametrize("name", sorted(BENT))
def test_pages_bent_out_of_the_plain_form_read_the_same_both_ways(name: str) -> None:
    fast, full = _both(BENT[name])
    assert fast == full


def test_the_fast_path_reads_the_counters_and_drops_gauges() -> None:
    m = parse_metrics((LLAMA_FIXTURES / "metrics.generating-with-deferred.txt").read_text())
    assert "requests_deferred" not in m and m["n_decode_total"] > 0
    assert m["requests_processing"] == 1  # the one gauge kept: whether a request runs (where /slots is not read)
    idle = parse_metrics((LLAMA_FIXTURES / "metrics.idle.txt").read_text())
    assert idle["requests_processing"] == 0 and "n_busy_slots_per_decode" not in idle


LINE = st.one_of(
    st.sampled_from(["# TYPE a counter", "# TYPE a gauge", "# TYPE a_total counter", "# HELP a some help",
                     "# HELP a", "a 1", "a_total 2", "a{x=\"1\"} 3", "a{x=\"1\",} 3", "a{} 4", "a 1e400", "a -1",
                     "a NaN", "a 1 123", "a{x=\"1\"} abc", "a{x=\"1\"} 3 99", "# comment", "", "a", "#", "a{x=1} 2",
                     "llamacpp:a 5",
                     "# TYPE llamacpp:a counter"]),
    st.text(alphabet="a_{}=\"\\# 0123456789.eE+-:TYPEHLcounter\t", max_size=20))


@settings(max_examples=1500, deadline=None, database=None)
@given(st.lists(LINE, max_size=10))
def test_generated_pages_read_the_same_both_ways(lines: list[str]) -> None:
    fast, full = _both("\n".join(lines) + "\n")
    assert fast == full


def _read(reader: MetricsReader, text: str) -> object:
    rejected: list[str] = []
    try:
        return reader.read(text, rejected), rejected
    except MetricsTextError:
        return MetricsTextError


def test_a_page_of_the_same_shape_is_read_by_its_layout_and_reads_the_same() -> None:
    reader = MetricsReader()
    later = (LLAMA_FIXTURES / "metrics.generating-later.txt").read_text()
    assert _read(reader, GENERATING) == _both(GENERATING)[1]
    assert reader.layout_reads == 0
    counters, rejected = _read(reader, later)  # type: ignore[misc]
    assert reader.layout_reads == 1  # same lines, other numbers
    assert (counters, rejected) == _both(later)[1]
    assert counters["n_decode_total"] != parse_metrics(GENERATING)["n_decode_total"]


def test_a_page_that_changed_shape_is_read_again_whole() -> None:
    reader = MetricsReader()
    _read(reader, GENERATING)
    for bent in BENT.values():
        assert _read(reader, bent) == _both(bent)[1]
        assert _read(reader, GENERATING) == _both(GENERATING)[1]
    assert reader.layout_reads < 2 * len(BENT)  # a bent page is never read by the plain page's layout


def test_a_value_that_is_not_a_number_fails_the_page_even_in_a_known_layout() -> None:
    reader = MetricsReader()
    _read(reader, GENERATING)
    bad = re.sub(r"(?m)^(llamacpp:n_decode_total) [0-9]+$", r"\1 16x29", GENERATING)
    assert bad != GENERATING
    assert _read(reader, bad) == _both(bad)[1] == MetricsTextError
    huge = re.sub(r"(?m)^(llamacpp:n_decode_total) [0-9]+$", r"\1 1e400", GENERATING)
    _read(reader, GENERATING)  # (the bad page dropped the layout: learnt again)
    layout_reads = reader.layout_reads
    assert _read(reader, huge) == _both(huge)[1]  # read by the layout, then left out as not a count
    assert reader.layout_reads == layout_reads + 1
    assert "n_decode_total" in _read(reader, huge)[1]  # type: ignore[index]


def test_a_page_too_long_keeps_no_layout() -> None:
    reader = MetricsReader()
    long = GENERATING + "".join(f"# TYPE c{i} counter\nc{i} {i}\n" for i in range(MAX_LAYOUT_LINES))
    _read(reader, long)
    _read(reader, long)
    assert reader.layout_reads == 0


NUMBER = st.one_of(st.integers(0, 10**20).map(str), st.floats(allow_nan=True).map(repr),
                   st.sampled_from(["+Inf", "-Inf", "NaN", "1e400", "-3", ".5", "7.", "x", "1_0"]))


@settings(max_examples=400, deadline=None, database=None)
@given(st.lists(LINE, max_size=8), st.lists(NUMBER, min_size=1, max_size=20))
def test_a_generated_page_read_again_with_other_numbers_reads_the_same_as_the_full_parser(
        lines: list[str], numbers: list[str]) -> None:
    first = "\n".join(lines) + "\n"
    values = iter(numbers * 20)
    second = "\n".join(ln if ln.startswith("#") or " " not in ln else ln.rsplit(" ", 1)[0] + " " + next(values)
                       for ln in lines) + "\n"
    reader = MetricsReader()
    assert _read(reader, first) == _both(first)[1]
    assert _read(reader, second) == _both(second)[1]
