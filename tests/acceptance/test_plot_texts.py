"""Every text of the two plots and the what-if plot, at the story points of every scenario, at 1280×800, 1024×640 and
800×600, light and dark: none over another text or a marker dot, none cut by its view.

Each scenario's stretch is watched once in the window (``story_window``); at the first poll at or after each of its
moments, and at its end, the window is drawn in both schemes at the three sizes and its plots' texts walked
(``plot_texts``): titles, axis names and ticks, legend names, the labels on the data, the event lane's words.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pytestqt")

from plot_texts import window_plot_problems
from PySide6 import QtWidgets
from stories import STORIES
from story_window import watch_in_window

SIZES = ((1280, 800), (1024, 640), (800, 600))
WATCHES = [pytest.param(name, i, id=f"{name}[{i}]") for name, story in STORIES.items()
           for i in range(len(story.watches))]


@pytest.mark.slow
@pytest.mark.parametrize(("scenario", "i"), WATCHES)
def test_no_plot_text_overlaps_or_is_cut(qapp: Any, scenario: str, i: int) -> None:
    watch = STORIES[scenario].watches[i]
    due = sorted({m.at_s for m in watch.moments} | {watch.until_s})
    found: list[str] = []
    looked: list[float] = []

    def look(win: Any, shown: Any) -> None:
        if not due or shown.t_s < due[0] - 1e-9:
            return
        while due and shown.t_s >= due[0] - 1e-9:
            due.pop(0)
        looked.append(shown.t_s)
        for scheme in ("light", "dark"):
            win.set_scheme(scheme)
            for w, h in SIZES:
                win.resize(w, h)
                QtWidgets.QApplication.processEvents()
                found.extend(window_plot_problems(win, f"{shown.t_s:.0f} s, {w}×{h} {scheme}:"))
        win.resize(1280, 800)

    watch_in_window(scenario, watch, on_poll=look)
    assert looked and not due
    assert not found, f"{len(found)} problems, the first:\n" + "\n".join(found[:15])
