"""Bandwidth: achieved vs peak GB/s per device (GPUs, unified memory, host RAM when decode reads it), memory busy
%, PCIe RX/TX — the signature of a spill."""

from __future__ import annotations

from PySide6 import QtWidgets

from kvmon.core.snapshot import GpuView, Snapshot
from kvmon.core.words import bandwidth_source_words
from kvmon.gui import fmt, theme
from kvmon.gui.flow import stack
from kvmon.gui.panels.bars import Bar, BarsWidget, Segment
from kvmon.gui.panels.memory import bandwidth_text, device_label


def readers(s: Snapshot) -> int:
    """The devices a token's reads are split over (each GPU and the host that read part of it)."""
    return sum(1 for g in s.gpus if g.achieved_bandwidth_bytes_per_s) + (1 if s.host.achieved_bandwidth_bytes_per_s
                                                                         else 0)


def _split_note(n: int, share: float | None) -> str:
    """A device's part of each step when several read in turn: its bar is its rate while its layers run."""
    if n <= 1:
        return ""
    part = f"its layers take {fmt.percent(share)} of each step" if share else "it reads for its share of each step"
    return (f"\nThe model is split over {n} devices that read their layers in turn: {part}, and the bar is its rate "
            "while they run (so it and the header's share of the ceiling tell one story).")


def _achieved(ach: float | None, peak: float, share: float | None, n_readers: int, achieved: str,
              peak_words: str) -> tuple[float | None, tuple[Segment, ...]]:
    """A bar's rate and its part: what the device read, or, when its layers run in turn with other devices', its rate
    while they run (``achieved``: the words for the first, "{}" where the figure goes)."""
    if ach is not None and share and n_readers > 1:
        ach = ach / share
        return ach, (Segment("bandwidth", min(ach, peak), f"While its layers run ({fmt.percent(share)} of each "
                             f"step): {fmt.gb_s(ach)}\nPeak: {peak_words}"),)
    if ach is not None and ach > 0:
        return ach, (Segment("bandwidth", min(ach, peak), f"{achieved.format(fmt.gb_s(ach))}\nPeak: {peak_words}"),)
    return ach, ()


def bandwidth_bar(g: GpuView, n_readers: int = 1) -> Bar | None:
    """Achieved memory bandwidth against the device's peak, or None when the peak is unknown; ``n_readers``: the
    devices a token's reads are split over."""
    peak = g.peak_bandwidth_bytes_per_s
    if peak is None or peak <= 0:
        return None
    src = bandwidth_source_words(g.bandwidth_source)
    ach, segs = _achieved(g.achieved_bandwidth_bytes_per_s, peak, g.step_share, n_readers,
                          "Achieved: {} (computed: decode tok/s × bytes read per token)",
                          f"{fmt.gb_s(peak)} (from {src})")
    pct = f" ({fmt.percent(ach / peak)})" if ach is not None else ""
    if g.kind == "unified_memory" or g.source == "log":
        second = f"peak: {src}"
    else:
        second = f"PCIe ↓{fmt.gb_s(g.pcie_rx_bytes_per_s)} ↑{fmt.gb_s(g.pcie_tx_bytes_per_s)}"
    note = f"{fmt.gb_s(ach)} of {fmt.gb_s(peak)}{pct}\n{second}"
    tip = (f"{g.name or device_label(g)}: achieved {fmt.gb_s(ach)} of peak {fmt.gb_s(peak)} (peak from {src})\n"
           + (f"Memory busy {fmt.percent_value(g.memory_busy_percent)} (duty cycle, not bandwidth)\n"
              f"PCIe RX {fmt.gb_s(g.pcie_rx_bytes_per_s)} / TX {fmt.gb_s(g.pcie_tx_bytes_per_s)} "
              f"of {fmt.gb_s(g.pcie_bandwidth_bytes_per_s)} link (measured)" if g.kind != "unified_memory" else
              "Unified memory: the CPU and the GPU share this bus")
           + ("" if ach is not None else f"\nAchieved unknown: {g.reasons.get('achieved_bandwidth', 'idle')}")
           + (_split_note(n_readers, g.step_share) if ach is not None else ""))
    return Bar(device_label(g), float(peak), segs, note, tip=tip)


def host_bandwidth_bar(s: Snapshot) -> Bar | None:
    """Host RAM's row when decode reads from it: achieved against the host's bandwidth, or why that is unknown."""
    h = s.host
    if not h.in_ceiling:
        return None
    peak = h.host_bandwidth_bytes_per_s
    if not peak:
        return Bar("Host", 1.0, (), f"read by decode\n{bandwidth_text(h)}", limit_line=False,
                   tip="Decode reads weights or KV from host RAM, but the host's bandwidth is unknown: kvmon measures "
                       "it once while no slot decodes; or set it in Settings or with --bandwidth host=GB/s")
    ach, segs = _achieved(h.achieved_bandwidth_bytes_per_s, peak, h.step_share, readers(s),
                          "Achieved from host RAM: {} (computed)", bandwidth_text(h))
    pct = f" ({fmt.percent(ach / peak)})" if ach is not None else ""
    note = f"{fmt.gb_s(ach)} of {fmt.gb_s(peak)}{pct}\npeak: {bandwidth_text(h).split(' (', 1)[-1].rstrip(')')}"
    tip = (f"Host RAM: decode reads {fmt.gb_s(ach)} of {bandwidth_text(h)}"
           + (f"\n{h.host_bandwidth_note}" if h.host_bandwidth_note else "")
           + (_split_note(readers(s), h.step_share) if ach is not None else ""))
    return Bar("Host", float(peak), segs, note, tip=tip)


class BandwidthPanel(QtWidgets.QGroupBox):
    """One bar per device: achieved bandwidth as a share of the peak; the note carries busy % and PCIe traffic."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__("Bandwidth", parent)
        self.bars = BarsWidget()
        stack(self, self.bars, sides=theme.GAP, ends=theme.UNIT)

    def update_snapshot(self, s: Snapshot) -> None:
        """Render bandwidth figures of one snapshot (a bar is painted again only when what it shows changed)."""
        n = readers(s)
        rows = [b for b in (bandwidth_bar(g, n) for g in s.gpus) if b is not None]
        hb = host_bandwidth_bar(s)
        if hb is not None:
            rows.append(hb)
        why = s.reasons.get("ceiling_tok_s") or s.gpus_unavailable_reason or "peak bandwidth unknown"
        self.bars.set_bars(tuple(rows), f"No bandwidth readings: {why}")
