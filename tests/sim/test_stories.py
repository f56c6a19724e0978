"""The story declarations: every scenario has a story, and key moments for its help."""

from __future__ import annotations

from kvmon.sim.stories import STORIES


def test_every_scenario_has_a_story() -> None:
    from kvmon.sim.catalog import names

    assert sorted(STORIES) == sorted(names()), "a built-in scenario without a story (kvmon.sim.stories), or a story " \
                                               "of no scenario"
    for story in STORIES.values():
        assert any(w.moments for w in story.watches), f"{story.scenario}: a story says what the user sees"
        assert any(m.ceiling for w in story.watches for m in w.moments), f"{story.scenario}: no ceiling point"
        assert any(m.bars for w in story.watches for m in w.moments), f"{story.scenario}: no memory bars point"
        assert any(m.forecast for w in story.watches for m in w.moments), f"{story.scenario}: no forecast point"


def test_every_scenario_has_key_moments_for_its_help() -> None:
    from kvmon.sim.stories import key_moments

    assert all(key_moments(name) for name in STORIES), [n for n in STORIES if not key_moments(n)]
    assert [(m.at_s, m.level) for m in key_moments("spill-4090")] == [(100.0, "ok"), (260.0, "critical"),
                                                                      (310.0, "critical"), (360.0, "critical")]
