"""One rule for the numbers in a server's JSON: bools, NaN, infinities and (unsigned) negatives are unknown."""

from __future__ import annotations

import math

import pytest

from kvmon.core.jsonvals import json_float, json_int, json_str


@pytest.mark.parametrize("value", [True, False, None, "7", [7], {"n": 7}, math.nan, math.inf, -math.inf, -1, -0.5])
def test_not_a_count(value: object) -> None:
    assert json_int(value) is None and json_float(value) is None


def test_counts_sizes_and_rates() -> None:
    assert json_int(7) == 7 and json_int(7.0) == 7 and json_int(7.5) is None and json_int(0) == 0
    assert json_float(7) == 7.0 and json_float(2.5) == 2.5 and json_float(0) == 0.0
    assert json_int(2**40) == 2**40


def test_signed_fields_keep_their_minus_one_but_not_nan() -> None:
    assert json_int(-1, signed=True) == -1 and json_int(-1.0, signed=True) == -1
    assert json_float(-0.5, signed=True) == -0.5 and json_int(math.nan, signed=True) is None
    assert json_int(True, signed=True) is None


def test_strings() -> None:
    assert json_str("x") == "x" and json_str("") is None and json_str(3) is None and json_str(None) is None
