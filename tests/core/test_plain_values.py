"""Snapshot values as plain JSON and back, the round trip each recording line makes: NaN and the infinities kept
exactly, and a value that does not fit its field refused with the reason the replay shows."""

from __future__ import annotations

import enum
import json
import math
from dataclasses import dataclass

import pytest

from kvmon.core.plain_values import RecordingLineError, from_plain, to_plain


class Kind(enum.Enum):
    GPU = "gpu"
    HOST = "host"


@dataclass(frozen=True)
class Row:
    name: str
    kind: Kind
    tok_s: float | None
    sizes: tuple[int, ...]


def test_nan_and_the_infinities_survive_json_exactly() -> None:
    rows = (Row("a", Kind.GPU, math.inf, (1, 2)), Row("b", Kind.HOST, -math.inf, ()), Row("c", Kind.GPU, None, (3,)))
    line = json.dumps(to_plain(rows), allow_nan=False)  # strict JSON: a reader in any language takes it
    back = from_plain(tuple[Row, ...], json.loads(line))
    assert back == rows
    nan = from_plain(Row, json.loads(json.dumps(to_plain(Row("n", Kind.GPU, math.nan, ())))))
    assert math.isnan(nan.tok_s)


@pytest.mark.parametrize(("tp", "value", "reason"), [
    (float, {"__float__": "1e400"}, "a tagged float of '1e400'"),
    (int, True, "True where a number belongs"),
    (int, None, "null where a value belongs"),
    (float, "fast", "str where float belongs"),
])
def test_a_value_that_does_not_fit_is_refused_with_its_reason(tp: type, value: object, reason: str) -> None:
    with pytest.raises(RecordingLineError) as err:
        from_plain(tp, value)
    assert str(err.value) == reason


def test_a_count_past_any_counter_a_server_keeps_is_refused() -> None:
    with pytest.raises(RecordingLineError):
        from_plain(int, 2**70)


def test_an_optional_field_takes_null() -> None:
    assert from_plain(float | None, None) is None
    assert from_plain(float | None, 3) == 3.0
