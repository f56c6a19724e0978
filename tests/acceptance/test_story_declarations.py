"""The story declarations: every scenario has a story, and the story checks every key moment its help lists."""

from __future__ import annotations

from stories import STORIES

from kvmon.sim.catalog import key_moments, names


def test_every_scenario_has_a_story() -> None:
    assert sorted(STORIES) == sorted(names()), "a built-in scenario without a story (tests/stories.py), or a story " \
                                               "of no scenario"
    for story in STORIES.values():
        assert any(w.moments for w in story.watches), f"{story.scenario}: a story says what the user sees"
        assert any(m.ceiling for w in story.watches for m in w.moments), f"{story.scenario}: no ceiling point"
        assert any(m.bars for w in story.watches for m in w.moments), f"{story.scenario}: no memory bars point"
        assert any(m.forecast for w in story.watches for m in w.moments), f"{story.scenario}: no forecast point"


def test_every_scenario_has_key_moments_for_its_help() -> None:
    assert all(key_moments(name) for name in names()), [n for n in names() if not key_moments(n)]
    assert [m.at_s for m in key_moments("spill-4090")] == [100.0, 260.0, 310.0, 360.0]


def test_the_story_checks_the_headline_at_each_key_moment() -> None:
    """A key moment in --help that no story checks could show anything; a checked headline is a key moment."""
    for name, story in STORIES.items():
        checked = sorted((m.at_s, m.name) for w in story.watches for m in w.moments if m.level is not None)
        assert checked == sorted((m.at_s, m.name) for m in key_moments(name)), name
