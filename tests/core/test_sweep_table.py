"""Sweep tables written and read back: a file that is not a sweep is said clearly."""

from __future__ import annotations

import pytest

from kvmon.core.sweep_table import SweepFileError, read_text


@pytest.mark.parametrize(("text", "why"), [
    ("[1, 2]", "not a kvmon sweep"),
    ('{"kind": "kvmon-sweep", "rows": []}', "a sweep with no rows"),
    ('{"kind": "kvmon-sweep", "rows": [{"decode_tok_s": 5}]}', "row 1 has no depth"),
    ('{"kind": "kvmon-sweep", "rows": [{"depth_tokens": 1, "decode_tok_s": "fast"}]}', "row 1's decode speed is not a "
                                                                                         "number"),
    ("{", "not JSON"),
])
def test_a_file_that_is_not_a_sweep_is_said_clearly(text: str, why: str) -> None:
    with pytest.raises(SweepFileError, match=why):
        read_text(text)
