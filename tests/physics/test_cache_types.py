"""KV cache types as llama.cpp stores them: bytes per value, whole blocks per row, the cheaper type to suggest, and
a clear error for a name llama.cpp does not accept."""

from __future__ import annotations

import pytest

from kvmon.physics.cache_types import UnknownCacheType, bytes_per_element, cache_type, smaller_cache_type


@pytest.mark.parametrize(("name", "per_value"), [
    ("f32", 4.0), ("f16", 2.0), ("bf16", 2.0), ("q8_0", 34 / 32), ("q4_0", 18 / 32), ("iq4_nl", 18 / 32),
    ("fp8", 1.0), (None, 2.0), ("Q8_0", 34 / 32), (" q4_1 ", 20 / 32),
])
def test_bytes_per_value(name: str | None, per_value: float) -> None:
    assert bytes_per_element(name) == per_value


def test_a_row_takes_whole_blocks() -> None:
    q8 = cache_type("q8_0")
    assert q8.bytes_for(32) == 34
    assert q8.bytes_for(33) == 68
    assert q8.bytes_for(0) == 0
    with pytest.raises(ValueError, match="negative"):
        q8.bytes_for(-1)


def test_an_unknown_type_names_every_type_llama_cpp_accepts() -> None:
    with pytest.raises(UnknownCacheType) as err:
        cache_type("q3_k")
    assert "unknown KV cache type 'q3_k'" in str(err.value)
    for accepted in ("f16", "q8_0", "q4_0", "iq4_nl"):
        assert accepted in str(err.value)


def test_the_suggestion_is_the_mildest_type_that_is_smaller_than_the_one_in_use() -> None:
    assert smaller_cache_type(None, ("q8_0", "q4_0")) == "q8_0"
    assert smaller_cache_type("q8_0", ("q8_0", "q4_0")) == "q4_0"
    assert smaller_cache_type("q4_0", ("q8_0", "q4_0")) is None
    assert smaller_cache_type("q3_k", ("q8_0",)) is None  # nothing is suggested against a type kvmon cannot size
