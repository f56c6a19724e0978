"""The event lane above the speed chart: each mark in a few words, close marks merged so that no two texts ever
print over each other, and a text near the edge moved inside the lane, never cut."""

from __future__ import annotations

from itertools import pairwise

from kvmon.core.history import Event
from kvmon.gui.panels.event_lane import TEXT_GAP_PX, arrange, event_label


def _width(text: str) -> float:
    return 7.0 * len(text)  # a fixed-pitch font's advance


def _event(kind: str, model: str = "qwen3-8b") -> Event:
    return Event(1.8e9, kind, model, f"{model} {kind}")


def test_each_kind_in_a_few_words() -> None:
    assert event_label(_event("loaded")) == "qwen3-8b loaded"
    assert event_label(_event("sleeping")) == "qwen3-8b asleep"
    assert event_label(_event("followed", "gemma-3-12b")) == "→ gemma-3-12b"
    assert event_label(_event("reloaded")) == "reloaded"
    assert event_label(_event("loaded", "a-model-with-a-very-long-name")) == "a-model-with-a-… loaded"


def test_marks_never_touch_and_stay_inside_the_lane() -> None:
    lane_w = 400.0
    kinds = ["loading", "loaded", "followed", "sleeping", "woke", "failed", "unloaded", "loaded"]
    xs = [10.0 + 45.0 * i for i in range(len(kinds))]
    marks = arrange(xs, [_event(k) for k in kinds], _width, lane_w)
    assert sum(len(m.events) for m in marks) == len(kinds)  # every event is in one mark
    assert len(marks) > 1
    for a, b in pairwise(marks):
        assert a.left + a.width + TEXT_GAP_PX <= b.left
    assert all(0.0 <= m.left and m.left + m.width <= lane_w for m in marks)


def test_a_merged_mark_is_named_by_its_most_telling_event_and_counts_the_rest() -> None:
    (mark,) = arrange([100.0, 103.0, 105.0], [_event("loaded"), _event("failed", "gpt-oss"), _event("woke")],
                      _width, 400.0)
    assert mark.text == "gpt-oss failed +2"
    assert mark.failed
