"""The built-in scenarios by name: one list for the command line's checks and its help, single-model and router
scenarios alike."""

from __future__ import annotations

import pytest

from kvmon.sim.catalog import check, descriptions, names, scenarios_help


def test_single_model_and_multi_model_scenarios_are_one_list() -> None:
    assert {"seed-3090x2", "spill-4090", "router", "llama-swap"} <= set(names())
    assert all(descriptions()[n].strip() for n in names())


def test_an_unknown_name_is_refused_with_every_known_one() -> None:
    assert check("spill-4090") == "spill-4090"
    with pytest.raises(ValueError) as err:
        check("spill-5090")
    assert "unknown scenario 'spill-5090'" in str(err.value)
    for name in names():
        assert name in str(err.value)


@pytest.mark.parametrize("width", [60, 100])
def test_the_help_names_every_scenario_within_the_width(width: int) -> None:
    text = scenarios_help(width)
    assert all(len(line) <= width for line in text.splitlines())
    for name in names():
        assert name in text
