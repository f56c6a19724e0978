"""GGUF metadata values read as a model's per-layer shape: scalars, per-layer arrays and the values Ollama trims,
each bad value a ShapeError naming its key."""

from __future__ import annotations

import pytest

from kvmon.physics.layers import ShapeError, as_int, per_layer


def test_whole_numbers_in_any_form_the_readers_hand_over() -> None:
    assert as_int(32, "llama.block_count") == 32
    assert as_int(32.0, "llama.block_count") == 32
    assert as_int([8], "llama.attention.head_count_kv") == 8  # a scalar held in a one-element array


@pytest.mark.parametrize(("value", "message"), [
    (-1, "llama.block_count is negative (-1)"),
    (2.5, "llama.block_count is 2.5, not an integer"),
    ("many", "llama.block_count is 'many', not an integer"),
    (b"32", "llama.block_count is '32', not an integer"),
])
def test_a_bad_value_names_its_key(value: object, message: str) -> None:
    with pytest.raises(ShapeError) as err:
        as_int(value, "llama.block_count")
    assert str(err.value) == message


def test_a_scalar_is_every_layers_and_an_array_is_one_per_layer() -> None:
    assert per_layer(8, 4, "kv") == [8, 8, 8, 8]
    assert per_layer([8, 0, 8, 0], 4, "kv") == [8, 0, 8, 0]
    assert per_layer([], 4, "kv") is None  # Ollama leaves long arrays out of /api/show


def test_an_array_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ShapeError, match="kv has 3 entries for 4 layers"):
        per_layer([8, 8, 8], 4, "kv")
