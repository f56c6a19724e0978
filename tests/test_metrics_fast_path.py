"""llama-server's /metrics read by the fast path and by prometheus_client's parser: the same counters, always.

The fast path (``_plain_counters``) takes the plain pages llama-server writes and hands anything else to the full
parser; these tests hold the two to one answer on every captured page, on pages bent the ways a fast path could get
wrong, and on generated ones.
"""

from __future__ import annotations

import pytest
from helpers_http import LLAMA_FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from kvmon.sources.llamacpp.parse import MetricsTextError, _plain_counters, parse_metrics, parse_metrics_fully

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


LINE = st.one_of(
    st.sampled_from(["# TYPE a counter", "# TYPE a gauge", "# TYPE a_total counter", "# HELP a some help",
                     "# HELP a", "a 1", "a_total 2", "a{x=\"1\"} 3", "a{x=\"1\",} 3", "a{} 4", "a 1e400", "a -1",
                     "a NaN", "a 1 123", "# comment", "", "a", "#", "a{x=1} 2", "llamacpp:a 5",
                     "# TYPE llamacpp:a counter"]),
    st.text(alphabet="a_{}=\"\\# 0123456789.eE+-:TYPEHLcounter\t", max_size=20))


@settings(max_examples=1500, deadline=None, database=None)
@given(st.lists(LINE, max_size=10))
def test_generated_pages_read_the_same_both_ways(lines: list[str]) -> None:
    fast, full = _both("\n".join(lines) + "\n")
    assert fast == full
