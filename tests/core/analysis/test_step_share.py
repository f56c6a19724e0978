"""Layers split over two GPUs run in turn: each GPU's bandwidth against its own share of the step tells the same
story as the header's share of the ceiling (not "94% of ceiling" beside "47%" on each GPU)."""

from __future__ import annotations

import re

import pytest


def test_each_gpu_reads_at_the_headers_share_while_its_layers_run() -> None:
    from kvmon.app.demo import demo_session, step_demo
    from kvmon.gui.panels.bandwidth import bandwidth_bar, readers

    session = demo_session("seed-3090x2", None, start_at_s=40.0, stepped=True)
    try:
        decoding = [s for s in step_demo(session, 40.0, 2.0) if s.efficiency is not None]
    finally:
        session.close()
    s = decoding[-1]
    assert len(s.gpus) == 2 and sum(g.step_share or 0 for g in s.gpus) == pytest.approx(1.0, abs=0.02)
    for g in s.gpus:
        assert g.step_share is not None and g.achieved_bandwidth_bytes_per_s and g.peak_bandwidth_bytes_per_s
        while_running = g.achieved_bandwidth_bytes_per_s / g.step_share
        assert while_running / g.peak_bandwidth_bytes_per_s == pytest.approx(s.efficiency, rel=0.03)
        bar = bandwidth_bar(g, readers(s))
        assert bar is not None
        shown = re.search(r"\((\d+)%\)$", bar.note.split("\n")[0])  # the rate while its layers run, on one line
        assert shown is not None and abs(int(shown.group(1)) - 100 * s.efficiency) <= 2.5
        share = re.search(r"its layers take (\d+)% of each step", bar.tip)  # its part of the step, on hover
        assert share is not None and int(share.group(1)) == round(100 * g.step_share)


def test_a_spilled_model_reads_host_ram_at_its_share_too() -> None:
    """Spilled: the GPU and host RAM read their parts in turn; each one's rate while its part runs, against its own
    peak, is the share of the ceiling the header shows."""
    from kvmon.app.demo import demo_session, step_demo

    session = demo_session("spill-4090", None, start_at_s=350.0, stepped=True)
    try:
        decoding = [s for s in step_demo(session, 30.0, 2.0) if s.efficiency is not None]
    finally:
        session.close()
    s = decoding[-1]
    h, (g,) = s.host, s.gpus
    assert h.step_share is not None and g.step_share is not None and h.step_share + g.step_share == pytest.approx(1.0)
    for ach, share, peak in ((g.achieved_bandwidth_bytes_per_s, g.step_share, g.peak_bandwidth_bytes_per_s),
                             (h.achieved_bandwidth_bytes_per_s, h.step_share, h.host_bandwidth_bytes_per_s)):
        assert ach is not None and peak and ach / share / peak == pytest.approx(s.efficiency, rel=0.03)
