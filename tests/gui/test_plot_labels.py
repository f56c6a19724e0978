"""Placing texts on a plot's data: in the view, over no other text and no dot, off the curves where it can be, and
where it was while what it names moves a pixel."""

from __future__ import annotations

import itertools

import numpy as np

from kvmon.gui.plot_labels import Label, along_top, around, inside, overlaps, place, polyline_points

VIEW = (0.0, 0.0, 400.0, 300.0)


def test_labels_never_overlap_each_other_or_a_dot_and_stay_in_the_view() -> None:
    """Six labels at one crowded point and a dot there: each gets a place of its own, or none."""
    dot = (195.0, 145.0, 10.0, 10.0)
    labels = [Label(f"l{i}", 80.0, 13.0, around(200.0, 150.0, 80.0, 13.0)) for i in range(6)]
    got = place(labels, VIEW, [dot])
    rects = [r for r, _i in (g for g in got.values() if g is not None)]
    assert len(rects) >= 4
    for a, b in itertools.combinations(rects, 2):
        assert not overlaps(a, b)
    assert all(inside(r, VIEW) and not overlaps(r, dot) for r in rects)


def test_a_label_at_the_edge_moves_inside_rather_than_be_cut() -> None:
    """A point at the right edge: its label goes to the left of it ("you are he" never happens)."""
    got = place([Label("here", 70.0, 13.0, around(398.0, 100.0, 70.0, 13.0))], VIEW)["here"]
    assert got is not None and inside(got[0], VIEW) and got[0][0] + 70.0 < 398.0


def test_a_label_with_no_room_is_not_shown() -> None:
    got = place([Label("wide", 500.0, 13.0, around(200.0, 150.0, 500.0, 13.0))], VIEW)
    assert got["wide"] is None


def test_a_label_keeps_off_a_curve_when_it_can() -> None:
    """A falling line through the point: the label takes a side the line does not cross."""
    x = np.linspace(0.0, 400.0, 50)
    curve = polyline_points(x, 150.0 + (x - 200.0) * 0.5)
    got = place([Label("ms", 80.0, 13.0, around(200.0, 150.0, 80.0, 13.0, first="right"))], VIEW, soft=curve)["ms"]
    assert got is not None
    r = got[0]
    x_in = (curve[:, 0] >= r[0]) & (curve[:, 0] <= r[0] + r[2])
    assert not (x_in & (curve[:, 1] >= r[1]) & (curve[:, 1] <= r[1] + r[3])).any()


def test_a_label_stays_on_its_side_while_its_point_moves_a_little() -> None:
    """The candidate taken last time is kept unless another is clearly better: no jumping between polls."""
    first = place([Label("here", 70.0, 13.0, around(200.0, 150.0, 70.0, 13.0))], VIEW)["here"]
    assert first is not None
    side = first[1]
    blocked_right = (205.0, 100.0, 100.0, 100.0)  # a dot where the first choice was: it moves elsewhere
    moved = place([Label("here", 70.0, 13.0, around(200.0, 150.0, 70.0, 13.0))], VIEW, [blocked_right])["here"]
    assert moved is not None and moved[1] != side
    again = place([Label("here", 70.0, 13.0, around(202.0, 150.0, 70.0, 13.0))], VIEW, [],
                  last={"here": moved[1]})["here"]
    assert again is not None and again[1] == moved[1]  # the dot went, the point moved 2 px: it stays put


def test_a_line_label_goes_beside_the_line_from_the_top() -> None:
    cands = along_top(100.0, 0.0, 60.0, 13.0)
    assert cands[0][0] > 100.0 and cands[1][0] + 60.0 < 100.0 and cands[0][1] < cands[2][1]


def test_polyline_points_follow_the_line_and_break_at_gaps() -> None:
    pts = polyline_points(np.array([0.0, 100.0, np.nan, 200.0, 300.0]), np.array([0.0, 0.0, np.nan, 50.0, 50.0]))
    assert pts.shape[1] == 2 and len(pts) > 40
    assert not ((pts[:, 0] > 101.0) & (pts[:, 0] < 199.0)).any()  # nothing across the gap


def test_an_optional_label_is_left_out_rather_than_put_over_a_curve() -> None:
    """A label of lesser use (the forecast at a depth the conversation has passed) shows only where it covers no
    curve; one that must show takes the least covered place."""
    x = np.linspace(0.0, 400.0, 400)
    band = np.concatenate([polyline_points(x, np.full(x.size, y)) for y in np.arange(0.0, 300.0, 6.0)])
    cands = around(200.0, 150.0, 80.0, 13.0)
    got = place([Label("must", 80.0, 13.0, cands), Label("may", 80.0, 13.0, cands, optional=True)], VIEW, soft=band)
    assert got["must"] is not None and got["may"] is None
