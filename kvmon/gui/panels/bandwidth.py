"""Bandwidth: achieved vs peak GB/s per GPU, memory busy %, PCIe RX/TX — the signature of a spill."""

from __future__ import annotations

from PySide6 import QtWidgets

from kvmon.core.snapshot import GpuView, Snapshot
from kvmon.gui import fmt
from kvmon.gui.panels.bars import Bar, BarsWidget, Segment


def bandwidth_bar(g: GpuView) -> Bar | None:
    """Achieved memory bandwidth against the GPU's peak, or None when the peak is unknown."""
    peak = g.peak_bandwidth_bytes_per_s
    if peak is None or peak <= 0:
        return None
    ach = g.achieved_bandwidth_bytes_per_s
    segs: tuple[Segment, ...] = ()
    if ach is not None and ach > 0:
        segs = (Segment("bandwidth", min(ach, peak), f"Achieved: {fmt.gb_s(ach)} (computed: decode tok/s × "
                        f"bytes read per token)\nPeak: {fmt.gb_s(peak)} ({g.bandwidth_source or 'unknown source'})"),)
    pct = f" ({fmt.percent(ach / peak)})" if ach is not None else ""
    note = (f"{fmt.gb_s(ach)} of {fmt.gb_s(peak)}{pct}\nbusy {fmt.percent_value(g.memory_busy_percent)} · "
            f"PCIe ↓{fmt.gb_s(g.pcie_rx_bytes_per_s)} ↑{fmt.gb_s(g.pcie_tx_bytes_per_s)}")
    tip = (f"GPU {g.index}: achieved {fmt.gb_s(ach)} of peak {fmt.gb_s(peak)} "
           f"(peak from {g.bandwidth_source or 'unknown'})\n"
           f"Memory busy {fmt.percent_value(g.memory_busy_percent)} (NVML duty cycle, not bandwidth)\n"
           f"PCIe RX {fmt.gb_s(g.pcie_rx_bytes_per_s)} / TX {fmt.gb_s(g.pcie_tx_bytes_per_s)} "
           f"of {fmt.gb_s(g.pcie_bandwidth_bytes_per_s)} link (measured)"
           + ("" if ach is not None else f"\nAchieved unknown: {g.reasons.get('achieved_bandwidth', 'idle')}"))
    return Bar(f"GPU {g.index}", float(peak), segs, note, tip=tip)


class BandwidthPanel(QtWidgets.QGroupBox):
    """One bar per GPU: achieved bandwidth as a share of the peak; the note carries busy % and PCIe traffic."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__("Bandwidth", parent)
        lay = QtWidgets.QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        self.bars = BarsWidget()
        lay.addWidget(self.bars)
        self._key: tuple[object, ...] | None = None  # the figures the bars show now

    def update_snapshot(self, s: Snapshot) -> None:
        """Render bandwidth figures of one snapshot; nothing is formatted when no figure it shows changed."""
        key = (tuple((g.index, g.peak_bandwidth_bytes_per_s, g.achieved_bandwidth_bytes_per_s, g.bandwidth_source,
                      g.memory_busy_percent, g.pcie_rx_bytes_per_s, g.pcie_tx_bytes_per_s,
                      g.pcie_bandwidth_bytes_per_s, g.reasons.get("achieved_bandwidth")) for g in s.gpus),
               s.gpus_unavailable_reason)
        if key == self._key:
            return
        self._key = key
        rows = tuple(b for b in (bandwidth_bar(g) for g in s.gpus) if b is not None)
        empty = f"No bandwidth readings: {s.gpus_unavailable_reason or 'peak bandwidth unknown'}"
        self.bars.set_bars(rows, empty)
