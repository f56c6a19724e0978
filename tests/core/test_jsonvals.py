"""One rule for the numbers in a server's JSON: bools, NaN, infinities and (unsigned) negatives are unknown."""

from __future__ import annotations

import math

import pytest

from kvmon.core.jsonvals import json_array, json_float, json_int, json_object, json_str, parse_json


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


@pytest.mark.parametrize("as_text", [False, True])
def test_integers_past_64_bits_are_infinite_wherever_they_stand(as_text: bool) -> None:
    """The quick look for a 20-digit run finds one at the start, the end and inside an array; 19 digits stay ints."""
    doc = '[123456789012345678901, {"a": 1234567890123456789, "b": -99999999999999999999999}, 10' + "0" * 400 + "]"
    value = parse_json(doc if as_text else doc.encode())
    assert value[0] == math.inf and value[2] == math.inf
    assert value[1]["a"] == 1234567890123456789 and value[1]["b"] == -math.inf
    assert parse_json(b"18446744073709551616") == math.inf
    assert parse_json(b"9223372036854775807") == 9223372036854775807  # 19 digits: the quick look says no
    assert parse_json(b'{"id": "12345678901234567890"}') == {"id": "12345678901234567890"}  # a string of digits


def test_a_digit_run_is_only_ascii_digits() -> None:
    """Arabic-Indic digits in a string are not a number: the document reads as written."""
    assert parse_json('{"t": "' + "\u0661" * 30 + '", "n": 5}') == {"t": "\u0661" * 30, "n": 5}


def test_an_object_or_array_of_another_type_reads_as_an_empty_one() -> None:
    doc = parse_json(b'{"details": {"family": "qwen3"}, "models": [1, 2], "config": [1], "tensors": "x"}')
    assert json_object(doc["details"]) == {"family": "qwen3"} and json_array(doc["models"]) == [1, 2]
    assert json_object(doc["config"]) == {} and json_array(doc["tensors"]) == []
    assert json_object(doc.get("absent")) == {} and json_array(None) == []
