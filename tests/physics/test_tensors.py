"""Tensor inventories: parameter counts as published, and no guess for an architecture without one."""

from __future__ import annotations

import pytest

from kvmon.physics.presets import PRESETS
from kvmon.physics.tensors import parameter_count, tensor_inventory


@pytest.mark.parametrize(("key", "published"), [
    ("llama-3.1-8b", 8_030_261_248),  # Ollama docs/api.md /api/show: general.parameter_count of llama3 8B
    ("qwen3-8b", 8_190_735_360),  # Qwen3-8B model card: 8.2B (6.95B without the embeddings)
    ("qwen2.5-7b", 7_615_616_512),  # Qwen2.5-7B model card: 7.61B
    ("mistral-7b", 7_248_023_552),  # Mistral-7B-v0.3: 7.25B
])
def test_parameter_counts_are_the_published_ones(key: str, published: int) -> None:
    assert parameter_count(PRESETS[key].metadata) == published


def test_architectures_without_an_inventory_are_not_guessed() -> None:
    assert tensor_inventory(PRESETS["qwen3-30b-a3b"].metadata) is None
    assert tensor_inventory({"general.architecture": "llama"}) is None  # keys missing
