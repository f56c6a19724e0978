"""A server reading held to what is physically possible: a value past its bound is unknown with a reason, never shown
as a fact, and an ordinary reading passes untouched."""

from __future__ import annotations

import dataclasses

from analysis_readings import reading

from kvmon.core.bounds import MAX_BYTES, plausible_reading
from kvmon.core.readings import SlotReading


def test_an_ordinary_reading_passes_untouched() -> None:
    r = reading(ctx=8192, n_ctx=32768)
    assert plausible_reading(r) is r


def test_a_slot_claiming_a_context_past_any_build_is_unknown_with_its_reason() -> None:
    r = reading(slots=(SlotReading(id=3, n_ctx=2**40, context_tokens=1000, processing=True),))
    checked = plausible_reading(r)
    assert checked.slots[0].n_ctx is None
    assert checked.slots[0].context_tokens == 1000
    assert "slot 3's context" in checked.reasons["slot3.n_ctx"]
    assert "impossible" in checked.reasons["slot3.n_ctx"]


def test_more_tokens_held_than_the_slot_holds_is_unknown_not_a_fill_past_full() -> None:
    r = reading(slots=(SlotReading(id=0, n_ctx=4096, context_tokens=9000, processing=True),))
    checked = plausible_reading(r)
    assert checked.slots[0].context_tokens is None
    assert checked.slots[0].n_ctx == 4096
    assert checked.reasons["slot0.context_tokens"] == "slot 0 reports 9,000 tokens held in a 4,096-token context"


def test_a_kv_cache_usage_outside_zero_to_one_is_unknown() -> None:
    checked = plausible_reading(reading(kv_in_use_fraction=1.7))
    assert checked.kv_in_use_fraction is None
    assert "1.7" in checked.reasons["kv_in_use_fraction"]


def test_a_model_larger_than_any_machine_loses_only_that_size() -> None:
    r = reading()
    r = dataclasses.replace(r, model=dataclasses.replace(r.model, weight_bytes=MAX_BYTES * 4))
    checked = plausible_reading(r)
    assert checked.model is not None and checked.model.weight_bytes is None
    assert checked.model.name == r.model.name
    assert "a model of" in checked.reasons["weight_bytes"]
    assert checked.slots == r.slots
