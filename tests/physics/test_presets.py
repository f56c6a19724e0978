"""The real model shapes kvmon's demos, simulator and what-if views start from: each builds a shape, and an unknown
one is refused with the known keys."""

from __future__ import annotations

import pytest

from kvmon.physics.kv import kv_bytes_per_token
from kvmon.physics.presets import PRESETS, preset


@pytest.mark.parametrize("key", sorted(PRESETS))
def test_every_preset_is_a_model_shape_with_a_kv_cache_and_plausible_weights(key: str) -> None:
    p = PRESETS[key]
    shape = p.shape()
    assert kv_bytes_per_token(shape).total > 0
    assert p.weight_bytes > 0 and p.quantization
    assert p.key == key


def test_llama_3_1_8b_keeps_128_kib_of_kv_per_token_at_f16() -> None:
    # 32 layers × 8 KV heads × 128 values × (K and V) × 2 bytes, as Meta publishes the model
    assert kv_bytes_per_token(preset("llama-3.1-8b").shape()).total == 32 * 8 * 128 * 2 * 2


def test_an_unknown_preset_names_the_known_ones() -> None:
    with pytest.raises(KeyError) as err:
        preset("llama-9-1t")
    assert "unknown model preset 'llama-9-1t'" in str(err.value)
    assert "llama-3.1-8b" in str(err.value)
