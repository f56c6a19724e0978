"""When host RAM is a device bar of its own, and how its bandwidth is said: known with where it came from (a
measurement with its date), or unknown with where to set it."""

from __future__ import annotations

import time

from kvmon.core.snapshot import Connection, ConnectionStatus, GpuView, HostView, Snapshot
from kvmon.gui.panels.memory import bandwidth_text, host_shown

GIB = 2**30
ONE_GPU = (GpuView(index=0),)


def _snap(host: HostView, gpus: tuple[GpuView, ...] = ONE_GPU) -> Snapshot:
    return Snapshot(1, 0.0, 1.8e9, connection=Connection(ConnectionStatus.CONNECTED), host=host, gpus=gpus)


def test_host_ram_is_a_bar_when_decode_reads_it_or_the_model_is_partly_there() -> None:
    assert host_shown(_snap(HostView(ram_total_bytes=64 * GIB, in_ceiling=True)))
    assert host_shown(_snap(HostView(ram_total_bytes=64 * GIB, weights_in_host_bytes=GIB)))
    assert host_shown(_snap(HostView(ram_total_bytes=64 * GIB), gpus=()))  # a CPU-only machine


def test_host_ram_is_no_bar_when_nothing_of_the_model_is_there_or_it_is_the_unified_bar() -> None:
    assert not host_shown(_snap(HostView(ram_total_bytes=64 * GIB)))
    assert not host_shown(_snap(HostView(ram_total_bytes=64 * GIB, weights_in_host_bytes=GIB, unified_with=0)))
    assert not host_shown(_snap(HostView()))  # the RAM's size is not known


def test_the_host_bandwidth_says_where_it_came_from() -> None:
    measured_at = time.mktime((2026, 11, 3, 12, 0, 0, 0, 0, -1))
    h = HostView(host_bandwidth_bytes_per_s=61.2e9, host_bandwidth_source="measured",
                 host_bandwidth_measured_at_unix_s=measured_at)
    assert bandwidth_text(h) == "61.2 GB/s (measured 2026-11-03)"
    assert bandwidth_text(HostView()) == "bandwidth unknown (Settings, --bandwidth host=GB/s)"


def test_the_legend_keeps_room_for_unexplained_memory_that_comes_and_goes(qtbot) -> None:
    """While a model loads, memory no part explains comes and goes between polls: its legend word appearing on a row
    of its own must not move the panels below the legend."""
    from kvmon.gui.panels.memory import MemoryPanel, legend_words

    panel = MemoryPanel()
    qtbot.addWidget(panel)
    panel.show()
    for width in range(300, 700, 10):
        panel.legend.show_words(legend_words())
        without = panel.legend.heightForWidth(width)
        panel.legend.show_words(legend_words(unattributed=True))
        assert panel.legend.heightForWidth(width) == without, width
    assert "unexplained" in panel.legend.words()
