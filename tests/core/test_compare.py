"""Two measured curves side by side: named by what differs between their configurations, and the table of both at
the depths both were measured over."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sweep_curves import F16, Q8, _sweep

from kvmon.core.compare import Curve, common_rows, curve_of_sweep, named, table_lines, to_csv


def test_the_curves_are_named_by_what_differs_between_their_configurations() -> None:
    a, b, title = named(curve_of_sweep(_sweep(F16, [100, 80, 60], 1.8e9)),
                        curve_of_sweep(_sweep(Q8, [110, 90, 70], 1.8e9)))
    assert a.label == "KV f16, flash attention auto"
    assert b.label == "KV q8_0, flash attention on"
    assert title == "KV f16 vs q8_0, flash attention auto vs on"


def test_curves_of_one_configuration_keep_their_names_and_say_where_each_came_from() -> None:
    a = Curve("tiny-llama", ((1.0, 100.0),), config=F16, source="sweep of 14:02")
    b = Curve("tiny-llama", ((1.0, 99.0),), config=replace(F16), source="recording.jsonl")
    a2, b2, title = named(a, b)
    assert (a2.label, b2.label) == ("tiny-llama (sweep of 14:02)", "tiny-llama (recording.jsonl)")
    assert title == "tiny-llama (sweep of 14:02) vs tiny-llama (recording.jsonl)"


def test_a_depth_one_curve_lacks_is_read_between_its_neighbours_and_depths_past_either_end_are_left_out() -> None:
    a = Curve("a", ((1.0, 100.0), (4096.0, 80.0), (8192.0, 60.0), (16384.0, 40.0)))
    b = Curve("b", ((1.0, 120.0), (8192.0, 90.0)))
    rows = common_rows(a, b)
    assert [r.depth_tokens for r in rows] == [1, 4096, 8192]
    assert rows[1].a_tok_s == 80.0
    assert rows[1].b_tok_s == pytest.approx(105.0, rel=1e-3)
    assert rows[2].ratio == pytest.approx(1.5)


def test_the_table_and_the_csv_carry_both_curves_under_their_names() -> None:
    a = Curve("KV f16", ((1.0, 100.0), (4096.0, 80.0)))
    b = Curve("KV q8_0", ((1.0, 110.0), (4096.0, 90.0)))
    rows = common_rows(a, b)
    lines = table_lines(a, b, rows)
    assert lines[0].split() == ["depth", "KV", "f16", "tok/s", "KV", "q8_0", "tok/s", "ratio"]
    assert lines[2].split() == ["4,096", "80.0", "90.0", "1.12×"]
    csv_lines = to_csv(a, b, rows).splitlines()
    assert csv_lines[0].startswith("depth_tokens,KV f16 decode_tok_s,KV q8_0 decode_tok_s")
    assert csv_lines[2] == "4096,80.0,90.0,,"


def test_a_curve_with_no_points_has_no_common_depths() -> None:
    assert common_rows(Curve("a", ()), Curve("b", ((1.0, 5.0),))) == ()
