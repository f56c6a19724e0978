"""Memory per device: weights / KV allocated (in-use shaded) / draft model / server compute & other / other
processes / free.

Every device is a bar: a discrete GPU's VRAM (the mark at its end is where the next allocation spills), unified
memory (the line at the GPU's working-set limit: past it macOS pages GPU memory), a device only the server's log
names (what the log said at load), and host RAM when the model or its cache lives there or there is no GPU (the line
at its end: swap).
"""

from __future__ import annotations

import time

from PySide6 import QtWidgets

from kvmon.core.snapshot import GpuView, HostView, Snapshot
from kvmon.gui import fmt, theme
from kvmon.gui.flow import FlowBox, stack
from kvmon.gui.panels.bars import Bar, BarsWidget, Segment
from kvmon.gui.text import text_label

_SOURCES = {"nvml": "measured (NVML)", "amdgpu": "measured (amdgpu sysfs)", "xe": "Intel xe", "i915": "Intel i915",
            "apple": "measured (vm_stat)", "log": "the server's log at load", "none": "not read"}
_WORKING_SET = {"metal": "Metal", "sysctl": "iogpu.wired_limit_mb", "log": "the server's log",
                "estimated": "estimated"}
# the bars' colours in words, in the order they are stacked (what no part covers is free: the empty track)
LEGEND = (("weights", "weights"), ("kv_in_use", "KV in use"), ("kv_allocated", "KV allocated"),
          ("server_other", "compute buffers"), ("other_processes", "other processes"))
UNATTRIBUTED = ("unattributed", "unexplained")  # memory in use no part explains: in the legend only while shown
DRAFT = ("draft", "draft model")  # in the legend only while a bar has such a part (speculative decoding)
SWATCH = "■"


def legend_words(unattributed: bool = False, draft: bool = False) -> tuple[tuple[str, str], ...]:
    """The legend's (quantity, word) entries: the parts a bar can show now."""
    words = (*LEGEND[:3], DRAFT, *LEGEND[3:]) if draft else LEGEND
    return (*words, UNATTRIBUTED) if unattributed else words


class Legend(FlowBox):
    """A swatch in each colour and its word, in small type, on as many rows as the width needs: room kept for
    "unexplained" (memory no part explains comes and goes while a model loads), so it moves nothing below."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent, h_gap=theme.GAP)
        self.entries: dict[str, QtWidgets.QWidget] = {}
        for quantity, word in legend_words(True, True):
            entry = stack(QtWidgets.QWidget(), text_label(SWATCH, size="small", colour=quantity),
                          text_label(word, size="small"), across=True)
            self.flow.addWidget(entry)
            self.entries[quantity] = entry
        self.flow.keep_room = {self.entries[UNATTRIBUTED[0]]}
        self.show_words(legend_words())

    def show_words(self, words: tuple[tuple[str, str], ...]) -> None:
        """Show the entries of ``words`` only."""
        shown = {q for q, _w in words}
        for quantity, entry in self.entries.items():
            if entry.isHidden() == (quantity in shown):
                entry.setVisible(quantity in shown)

    def words(self) -> list[str]:
        """The words shown now, in order."""
        return [e.findChildren(QtWidgets.QLabel)[1].text() for e in self.entries.values() if not e.isHidden()]


def _seg(quantity: str, value: float | None, what: str, source: str | None = None) -> Segment | None:
    if value is None or value <= 0:
        return None
    src = f"\nSource: {source}" if source else ""
    return Segment(quantity, float(value), f"{what}: {fmt.bytes_(value)}{src}")


def device_label(g: GpuView) -> str:
    """The bar's short label: "GPU 0", "Unified" (a Mac's or an APU's memory)."""
    return "Unified" if g.kind == "unified_memory" else f"GPU {g.index}"


def draft_segment(value: int | None, s: Snapshot) -> Segment | None:
    """The draft context of speculative decoding on one device: its part of the draft model's weights and KV cache,
    with what the whole draft holds in the tooltip."""
    m = s.model
    if not value or value <= 0:
        return None
    parts = " and ".join(f"{what} {fmt.bytes_(b)}" for what, b in (
        ("weights", m.draft_weight_bytes), (f"KV cache ({m.draft_kv_type_k}/{m.draft_kv_type_v})",
                                            m.draft_kv_allocated_bytes)) if b)
    src = s.provenance.get("draft_kv_allocated_bytes")
    return Segment("draft", float(value), f"Speculative decoding's draft ({m.draft_name}) here: {fmt.bytes_(value)}"
                   + (f"\nThe whole draft: {parts}" if parts else "")
                   + (f"\nIts KV cache: {src} (the model's cells, the draft's layers and types)" if src else ""))


def _model_segments(g: GpuView, s: Snapshot) -> list[Segment]:
    kv = _seg("kv_allocated", g.kv_allocated_bytes, "KV cache allocated", "computed (llama.cpp allocation rules)")
    if kv is not None and g.kv_in_use_bytes is not None and g.kv_allocated_bytes:
        frac = g.kv_in_use_bytes / g.kv_allocated_bytes
        kv = Segment(kv.quantity, kv.value, kv.tip + f"\nIn use (shaded): {fmt.bytes_(g.kv_in_use_bytes)}"
                     f" ({fmt.percent(frac)})", shade_fraction=frac)
    parts = [
        _seg("weights", g.weights_bytes, "Model weights", s.provenance.get("weight_bytes")),
        kv,
        draft_segment(g.draft_bytes, s),
        _seg("server_other", g.server_other_bytes, "Server compute buffers and other"),
        _seg("other_processes", g.other_processes_bytes, "Other processes", _SOURCES.get(g.source or "", None)),
    ]
    return [p for p in parts if p is not None]


def gpu_bar(g: GpuView, s: Snapshot) -> Bar | None:
    """The stacked memory bar of one device, or None when nothing of it is known."""
    segs = _model_segments(g, s)
    known = sum(p.value for p in segs)
    total = g.vram_total_bytes
    name = g.name or g.log_name or f"GPU {g.index}"
    if total is None or total <= 0:
        if known <= 0:
            return None
        why = g.reasons.get("vram_total_bytes", "its memory size is not known")
        return Bar(device_label(g), known, tuple(segs), f"{fmt.bytes_(known)} of the model\nsize unknown",
                   limit_line=False, tip=f"{name}: {why}")
    if g.vram_used_bytes is not None and g.vram_used_bytes - known > total * 0.005:
        rest = g.vram_used_bytes - known
        segs.append(Segment("unattributed", rest, f"In use, explained by no part above: {fmt.bytes_(rest)}\n"
                            + (g.reasons.get("vram_split") or "the split needs the server's process id")))
    free = g.vram_free_bytes
    if free is not None and free > 0:
        when = " when the model loaded (the server's log)" if g.source == "log" else ""
        segs.append(Segment("free", float(free), f"Free: {fmt.bytes_(free)}{when} "
                            f"({_SOURCES.get(g.source or '', 'measured')})"))
    if g.source == "log":
        note = f"{fmt.bytes_(known)} of {fmt.bytes_(total)}\nthe model, from the log"
    else:
        note = f"{fmt.bytes_(g.vram_used_bytes)} of {fmt.bytes_(total)}\nfree {fmt.bytes_(free)}"
    if g.kind == "unified_memory" and g.working_set_limit_bytes:
        ws = _WORKING_SET.get(g.working_set_source or "", g.working_set_source or "")
        est = "≈ " if g.working_set_source == "estimated" else ""
        note = (f"{fmt.bytes_(g.vram_used_bytes)} of {fmt.bytes_(total)}\n"
                f"GPU limit {est}{fmt.bytes_(g.working_set_limit_bytes)}")
        tip = (f"{name}: unified memory, {fmt.bytes_(total)} shared by CPU and GPU, {fmt.bytes_(free)} free."
               "\nThe mark inside the bar is "
               f"the GPU's working-set limit ({fmt.bytes_(g.working_set_limit_bytes)}, {ws}): what the model and its "
               "cache need past it, macOS pages out — decode slows sharply.")
        return Bar(device_label(g), float(total), tuple(segs), note, tip=tip,
                   limit_at=float(g.working_set_limit_bytes))
    if g.spill_used_bytes and g.vendor == "amd":
        note += f" · GTT {fmt.bytes_(g.spill_used_bytes)}"
    elif s.forecast.seconds_until_vram_full is not None:  # another program's growth: a time, not your tokens
        note += f" · full in {fmt.duration(s.forecast.seconds_until_vram_full)}"  # "≈ 2 min", "45 s"
    gtt = (f"\nGTT (system RAM the GPU maps; where allocations go when VRAM is full): "
           f"{fmt.bytes_(g.spill_used_bytes)} of {fmt.bytes_(g.spill_total_bytes)}"
           if g.vendor == "amd" and g.spill_total_bytes else "")
    tip = (f"GPU {g.index} {name}: used {fmt.bytes_(g.vram_used_bytes)} of {fmt.bytes_(total)}"
           f"{' (the server log at load; no live reading)' if g.source == 'log' else ''}"
           f"\nThe mark at the bar's end is the end of VRAM: what grows past it spills to host RAM over PCIe.{gtt}")
    return Bar(device_label(g), float(total), tuple(segs), note, tip=tip)


def host_shown(s: Snapshot) -> bool:
    """Host RAM is a device bar when decode reads from it, when nothing lives on a GPU, or when part of the model is
    there (on Apple Silicon the unified bar is that same RAM)."""
    h = s.host
    if not h.ram_total_bytes:
        return False
    if h.in_ceiling or not s.gpus:
        return True
    return bool((h.weights_in_host_bytes or 0) + (h.kv_in_host_bytes or 0) + (h.draft_in_host_bytes or 0)) and \
        h.unified_with is None


def bandwidth_text(h: HostView) -> str:
    """The host bandwidth and where it came from, for notes and tooltips."""
    if not h.host_bandwidth_bytes_per_s:
        return "bandwidth unknown (Settings, --bandwidth host=GB/s)"
    src = h.host_bandwidth_source or "unknown source"
    if src == "measured" and h.host_bandwidth_measured_at_unix_s:
        src = f"measured {time.strftime('%Y-%m-%d', time.localtime(h.host_bandwidth_measured_at_unix_s))}"
    return f"{fmt.gb_s(h.host_bandwidth_bytes_per_s)} ({src})"


def host_bar(s: Snapshot) -> Bar | None:
    """Host RAM as a device: the model's weights and KV there, other memory, available; past its end: swap."""
    if not host_shown(s):
        return None
    h = s.host
    assert h.ram_total_bytes is not None
    in_host = (h.weights_in_host_bytes or 0) + (h.kv_in_host_bytes or 0) + (h.draft_in_host_bytes or 0)
    segs = [x for x in (
        _seg("weights", h.weights_in_host_bytes, "Weights in host RAM", "the server's log or Ollama"),
        _seg("kv_allocated", h.kv_in_host_bytes, "KV cache in host RAM", "computed"),
        draft_segment(h.draft_in_host_bytes, s),
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
    held = " + ".join(w for w, b in (("weights", h.weights_in_host_bytes), ("KV", h.kv_in_host_bytes),
                                     ("draft", h.draft_in_host_bytes)) if b)
    used = h.ram_total_bytes - (h.ram_available_bytes or 0) if h.ram_available_bytes is not None else None
    second = f"{held} {fmt.bytes_(in_host)}" if in_host else f"free {fmt.bytes_(h.ram_available_bytes)}"
    note = f"{fmt.bytes_(used)} of {fmt.bytes_(h.ram_total_bytes)}\n{second}"
    if h.swap_used_bytes:
        note += f" · swap {fmt.bytes_(h.swap_used_bytes)}"
    mem = " · ".join(x for x in (h.cpu_name, h.memory_type) if x)
    tip = (f"Host RAM{': ' + mem if mem else ''}, {fmt.bytes_(h.ram_total_bytes)}; bandwidth {bandwidth_text(h)}"
           + (f"\n{h.host_bandwidth_note}" if h.host_bandwidth_note else "")
           + "\nLayers or KV cache here are read at host bandwidth. The mark at the bar's end is the end of "
             "RAM: past it the system swaps.")
    return Bar("Host", float(h.ram_total_bytes), tuple(segs), note, tip=tip)


class MemoryPanel(QtWidgets.QGroupBox):
    """One bar per device plus host RAM when it matters; repainted only when a number changed."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__("Memory", parent)
        self.bars = BarsWidget()
        self.legend = Legend()
        self.legend.setToolTip("What the colours of the bars are; what no part covers is free. The mark at a bar's "
                               "end is where the next allocation spills: the end of VRAM (to host RAM), of RAM (to "
                               "swap), or a Mac's GPU limit.")
        stack(self, self.bars, self.legend, sides=theme.GAP, ends=theme.UNIT)

    def update_snapshot(self, s: Snapshot) -> None:
        """Render the devices' memory of one snapshot (a bar is painted again only when what it shows changed)."""
        rows = [b for b in (gpu_bar(g, s) for g in s.gpus) if b is not None]
        hb = host_bar(s)
        if hb is not None:
            rows.append(hb)
        empty = f"No memory readings: {s.gpus_unavailable_reason or 'no device source'}"
        self.bars.set_bars(tuple(rows), empty)
        quantities = {p.quantity for b in rows for p in b.segments}
        self.legend.show_words(legend_words(UNATTRIBUTED[0] in quantities, DRAFT[0] in quantities))
