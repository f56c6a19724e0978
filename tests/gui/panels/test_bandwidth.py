"""A device's bandwidth bar: what it achieved against its peak with where the peak came from, the bar never drawn
past the peak, no bar without a peak, and an idle device saying why nothing was achieved."""

from __future__ import annotations

from kvmon.core.snapshot import GpuView
from kvmon.gui.panels.bandwidth import bandwidth_bar


def test_the_bar_says_the_achieved_share_of_the_peak_and_where_the_peak_came_from() -> None:
    g = GpuView(index=0, name="NVIDIA GeForce RTX 4090", peak_bandwidth_bytes_per_s=1008e9,
                achieved_bandwidth_bytes_per_s=806e9, bandwidth_source="table", memory_busy_percent=80.0)
    bar = bandwidth_bar(g)
    assert bar is not None
    assert (bar.label, bar.total) == ("GPU 0", 1008e9)
    assert [(s.quantity, s.value) for s in bar.segments] == [("bandwidth", 806e9)]
    assert bar.note.splitlines()[0] == "806 GB/s of 1.01 TB/s (80%)"
    assert "(peak from the published spec)" in bar.tip


def test_more_than_the_peak_is_said_but_never_drawn_past_it() -> None:
    g = GpuView(index=0, peak_bandwidth_bytes_per_s=1008e9, achieved_bandwidth_bytes_per_s=1200e9,
                bandwidth_source="nvml")
    bar = bandwidth_bar(g)
    assert bar is not None
    assert bar.segments[0].value == 1008e9
    assert "(119%)" in bar.note


def test_no_peak_no_bar() -> None:
    assert bandwidth_bar(GpuView(index=1, achieved_bandwidth_bytes_per_s=500e9)) is None


def test_an_idle_device_says_why_nothing_was_achieved() -> None:
    g = GpuView(index=0, peak_bandwidth_bytes_per_s=1008e9, bandwidth_source="nvml",
                reasons={"achieved_bandwidth": "idle: nothing decodes"})
    bar = bandwidth_bar(g)
    assert bar is not None and bar.segments == ()
    assert bar.note.startswith("— of 1.01 TB/s")
    assert "(peak from the driver)" in bar.tip
    assert bar.tip.endswith("Achieved unknown: idle: nothing decodes")
