"""Memory per GPU: weights / KV allocated (in-use shaded) / server compute & other / other processes / free.

The red line at the end of each bar is where the next allocation spills; host RAM appears when anything lives there.
"""

from __future__ import annotations

from PySide6 import QtWidgets

from kvmon.core.snapshot import GpuView, Snapshot
from kvmon.gui import fmt, theme
from kvmon.gui.panels.bars import Bar, BarsWidget, Segment

# the bars' colours in words, in the order they are stacked
LEGEND = (("weights", "weights"), ("kv_allocated", "KV cache"), ("kv_in_use", "KV in use"),
          ("server_other", "compute buffers"), ("other_processes", "other processes"), ("free", "free"))


def legend_html() -> str:
    """The compact legend under the bars: a swatch in each colour and its word."""
    return " &nbsp; ".join(f"<span style='color:{theme.hex_color(q)}'>■</span>&nbsp;{word.replace(' ', '&nbsp;')}"
                          for q, word in LEGEND)


def _seg(quantity: str, value: float | None, what: str, source: str | None = None) -> Segment | None:
    if value is None or value <= 0:
        return None
    src = f"\nSource: {source}" if source else ""
    return Segment(quantity, float(value), f"{what}: {fmt.bytes_(value)}{src}")


def gpu_bar(g: GpuView, s: Snapshot) -> Bar | None:
    """The stacked VRAM bar of one GPU, or None when its total is unknown."""
    total = g.vram_total_bytes
    if total is None or total <= 0:
        return None
    kv = _seg("kv_allocated", g.kv_allocated_bytes, "KV cache allocated", "computed (llama.cpp allocation rules)")
    if kv is not None and g.kv_in_use_bytes is not None and g.kv_allocated_bytes:
        frac = g.kv_in_use_bytes / g.kv_allocated_bytes
        kv = Segment(kv.quantity, kv.value, kv.tip + f"\nIn use (shaded): {fmt.bytes_(g.kv_in_use_bytes)}"
                     f" ({fmt.percent(frac)})", shade_fraction=frac)
    parts = [
        _seg("weights", g.weights_bytes, "Model weights", s.provenance.get("weight_bytes")),
        kv,
        _seg("server_other", g.server_other_bytes, "Server compute buffers and other"),
        _seg("other_processes", g.other_processes_bytes, "Other processes", "measured (NVML)"),
    ]
    segs = [p for p in parts if p is not None]
    known = sum(p.value for p in segs)
    if g.vram_used_bytes is not None and g.vram_used_bytes - known > total * 0.005:
        rest = g.vram_used_bytes - known
        segs.append(Segment("server_other", rest, f"Used, not attributed: {fmt.bytes_(rest)}\n"
                            + (g.reasons.get("vram_split") or "the split needs the server's process id")))
    free = g.vram_free_bytes
    if free is not None and free > 0:
        segs.append(Segment("free", float(free), f"Free VRAM: {fmt.bytes_(free)} (measured, NVML)"))
    note = f"{fmt.bytes_(g.vram_used_bytes)} of {fmt.bytes_(total)}\nfree {fmt.bytes_(free)}"
    if s.forecast.seconds_until_vram_full is not None:  # another program's growth: a time, not your tokens
        note += f" · full in ~{fmt.duration(s.forecast.seconds_until_vram_full)}"
    tip = (f"GPU {g.index} {g.name or ''}: used {fmt.bytes_(g.vram_used_bytes)} of {fmt.bytes_(total)}"
           "\nThe red line is the end of VRAM: what grows past it spills to host RAM over PCIe.")
    return Bar(f"GPU {g.index}", float(total), tuple(segs), note, tip=tip)


def host_bar(s: Snapshot) -> Bar | None:
    """Host RAM when the model or the KV cache lives partly there (partial offload or spill)."""
    h = s.host
    in_host = (h.weights_in_host_bytes or 0) + (h.kv_in_host_bytes or 0)
    if in_host <= 0 or not h.ram_total_bytes:
        return None
    segs = [x for x in (
        _seg("weights", h.weights_in_host_bytes, "Weights in host RAM"),
        _seg("kv_allocated", h.kv_in_host_bytes, "KV cache in host RAM"),
    ) if x is not None]
    used_other = h.ram_total_bytes - (h.ram_available_bytes or 0) - in_host
    if h.ram_available_bytes is not None and used_other > 0:
        segs.append(Segment("other_processes", used_other, f"Other host memory: {fmt.bytes_(used_other)}"))
    if h.ram_available_bytes:
        # available RAM may count the model's own mapped file again: the free part is what the bar has left
        room = h.ram_total_bytes - in_host - max(used_other, 0)
        free = min(float(h.ram_available_bytes), float(room))
        if free > 0:
            segs.append(Segment("free", free, f"Available: {fmt.bytes_(h.ram_available_bytes)}"))
    bw = h.host_bandwidth_bytes_per_s
    note = (f"{fmt.bytes_(in_host)} of the model in host RAM\n"
            + (f"read at {fmt.gb_s(bw)}" if bw else "host bandwidth unknown (settings)"))
    return Bar("Host", float(h.ram_total_bytes), tuple(segs), note, limit_line=False,
               tip="Host RAM: layers or KV cache here run at host/PCIe bandwidth — the spill cliff.")


class MemoryPanel(QtWidgets.QGroupBox):
    """One bar per GPU plus host RAM when used; repainted only when a number changed."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__("Memory", parent)
        lay = QtWidgets.QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        self.bars = BarsWidget()
        lay.addWidget(self.bars)
        self.legend = QtWidgets.QLabel(legend_html())
        self.legend.setWordWrap(True)  # a narrow window: two lines rather than a cut
        self.legend.setStyleSheet("font-size: 8pt;")
        self.legend.setToolTip("What the colours of the bars are. The red line is the end of VRAM: what grows "
                               "past it spills to host RAM.")
        lay.addWidget(self.legend)
        self._key: tuple[object, ...] | None = None  # the figures the bars show now

    def update_snapshot(self, s: Snapshot) -> None:
        """Render VRAM (and host RAM) of one snapshot; nothing is formatted when no figure it shows changed."""
        key = (tuple((g.index, g.name, g.vram_total_bytes, g.vram_used_bytes, g.vram_free_bytes, g.weights_bytes,
                      g.kv_allocated_bytes, g.kv_in_use_bytes, g.server_other_bytes, g.other_processes_bytes,
                      g.reasons.get("vram_split")) for g in s.gpus),
               s.host if (s.host.weights_in_host_bytes or s.host.kv_in_host_bytes) else None,
               s.forecast.seconds_until_vram_full, s.provenance.get("weight_bytes"), s.gpus_unavailable_reason)
        if key == self._key:
            return
        self._key = key
        rows = [b for b in (gpu_bar(g, s) for g in s.gpus) if b is not None]
        hb = host_bar(s)
        if hb is not None:
            rows.append(hb)
        empty = f"No GPU memory readings: {s.gpus_unavailable_reason or 'no GPU source'}"
        self.bars.set_bars(tuple(rows), empty)
