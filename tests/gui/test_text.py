"""The plain-text labels the panels use: a two-line label breaks where its parts meet, not inside a figure."""

from __future__ import annotations

from PySide6 import QtGui

from kvmon.gui.text import FitLabel


def _shown_in(width_of: str, text: str, qtbot) -> FitLabel:
    """A two-line label as wide as ``width_of`` needs, showing ``text``."""
    label = FitLabel(lines=2)
    qtbot.addWidget(label)
    label.resize(label.room_for(width_of), label.line_height())
    label.show()
    label.set(text)
    return label


def test_a_two_line_label_breaks_between_its_parts_when_each_fits_a_line(qtbot) -> None:
    text = "no reply measured yet · ceiling 113 tok/s here"
    label = _shown_in("no reply measured yet · ceiling", text, qtbot)
    assert label.text() == "no reply measured yet\nceiling 113 tok/s here"  # not "… ceiling 113" / "tok/s here"
    assert not label.elided and label.whole() == text


def test_a_part_longer_than_a_line_breaks_between_words_and_what_does_not_fit_ends_in_an_ellipsis(qtbot) -> None:
    text = "last reply, just now · ceiling 41.7 tok/s here, with words that need a third line to be read whole"
    label = _shown_in("last reply, just now · ceiling", text, qtbot)
    lines = label.text().split("\n")
    metrics = QtGui.QFontMetricsF(label.font())
    assert len(lines) == 2 and lines[0] == "last reply, just now · ceiling" and lines[1].endswith("…")
    assert all(metrics.horizontalAdvance(line) <= label.contentsRect().width() for line in lines)
    assert label.elided and text in label.toolTip()


def test_a_figure_and_its_unit_stay_on_one_line(qtbot) -> None:
    text = "Partly on the CPU: 2.90 GiB of the 15.4 GiB of weights in host RAM — capped at ~10 tok/s"
    label = _shown_in("Partly on the CPU: 2.90 GiB of the 15.4 GiB of weights in host RAM — capped at ~10", text,
                      qtbot)
    assert label.text().split("\n")[-1] == "~10 tok/s" and not label.elided


def test_a_one_line_label_too_narrow_drops_whole_parts(qtbot) -> None:
    label = FitLabel()
    qtbot.addWidget(label)
    label.resize(label.room_for("last prompt 5,908 tok/s · first"), label.line_height())
    label.show()
    label.set("last prompt 5,908 tok/s · first token 0.11 s")
    assert label.text() == "last prompt 5,908 tok/s · …" and label.elided
    assert "first token 0.11 s" in label.toolTip()
