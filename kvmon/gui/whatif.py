"""The what-if panel: pickers for the device (live, a GPU of the NVIDIA, AMD or Intel tables, an Apple chip, a CPU's
DDR4/DDR5 memory), model (live or a preset), context and cache type, and the calculator's answer
(``kvmon.core.whatif``): the ceiling curve, the KV cache size and the fit verdict.

The pickers and the answer sit above the plot (side by side in a wide panel, one above the other in a narrow one),
so the plot has the panel's whole width at every window size.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.core.snapshot import Snapshot
from kvmon.core.whatif import (
    GpuChoice,
    LiveModel,
    WhatIfResult,
    compute_whatif,
    live_gpu,
    live_model,
    presets,
    table_gpus,
)
from kvmon.gui import fmt, theme
from kvmon.gui.plot_labels import style_axes
from kvmon.gui.text import set_text, text_label
from kvmon.gui.widgets import TokenAxis, add_curve, make_plot, nice_ceiling, set_xy
from kvmon.physics.cache_types import CACHE_TYPES
from kvmon.physics.shape import ModelShape

CONTEXTS = (4096, 8192, 16384, 32768, 65536, 131072, 262144)
CACHE_CHOICES = ("f16", "q8_0", "q4_0", "bf16", "q5_1", "q5_0", "q4_1", "iq4_nl", "f32")
LIVE = "__live__"  # the model combo's data for the live model
SIDE_BY_SIDE_PX = 600  # a panel at least this wide has the pickers and the answer side by side
_FIGURE_UNIT = re.compile(r"(\d[KM]?) (tokens|[KMGT]iB)\b")  # a line breaks between words, never inside "131K tokens"


class Picker(QtWidgets.QComboBox):
    """Qt's combo box, whose choice ends in "…" when it is too long for the box (Qt's styles cut it off mid-word),
    with the whole choice on hover."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.currentTextChanged.connect(self.setToolTip)

    def initStyleOption(self, opt: QtWidgets.QStyleOptionComboBox) -> None:
        super().initStyleOption(opt)
        room = self.style().subControlRect(QtWidgets.QStyle.ComplexControl.CC_ComboBox, opt,
                                           QtWidgets.QStyle.SubControl.SC_ComboBoxEditField, self).width()
        opt.currentText = self.fontMetrics().elidedText(opt.currentText, QtCore.Qt.TextElideMode.ElideRight,
                                                        room - 2)


class Verdict(QtWidgets.QWidget):
    """The fit verdict in plain text: its word with its level's mark, in the level's colour ("● fits", "■ spills"),
    then what it means ("up to 131K tokens before spilling"), wrapping onto more lines in a narrow column."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        row = QtWidgets.QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(theme.UNIT)
        self.word = text_label(bold=True)
        self.rest = text_label(wrap=True)
        self.rest.setAlignment(QtCore.Qt.AlignmentFlag.AlignLeft | QtCore.Qt.AlignmentFlag.AlignTop)
        self.word.setAlignment(QtCore.Qt.AlignmentFlag.AlignLeft | QtCore.Qt.AlignmentFlag.AlignTop)
        row.addWidget(self.word, 0, QtCore.Qt.AlignmentFlag.AlignTop)
        row.addWidget(self.rest, 1)
        self._level: str | None = None

    def set(self, word: str, rest: str, tip: str, level: str | None = None) -> None:
        """Show ``word`` (with ``level``'s mark and colour; None: no mark, the text's colour) and ``rest``."""
        if level != self._level:
            self._level = level
            theme.tint(self.word, level)
        set_text(self.word, f"{theme.mark(level)} {word}" if level else word, tip)
        if self.word.isHidden() == bool(word):
            self.word.setVisible(bool(word))
        set_text(self.rest, _FIGURE_UNIT.sub("\\1\u00a0\\2", rest), tip)

    def text(self) -> str:
        """What it reads as: the word, its mark included, and the rest."""
        return " ".join(t for t in (self.word.text(), self.rest.text()) if t)


class WhatIfPanel(QtWidgets.QWidget):
    """Pickers and the answer above, the ceiling curve below; recomputed on each change."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._live: GpuChoice | None = None
        self._live_model: LiveModel | None = None
        self._gpus = table_gpus()
        self._presets = presets()
        lay = QtWidgets.QVBoxLayout(self)
        self._top = QtWidgets.QBoxLayout(QtWidgets.QBoxLayout.Direction.LeftToRight)
        lay.addLayout(self._top)
        form_box, answer_box = QtWidgets.QWidget(), QtWidgets.QWidget()
        form = QtWidgets.QFormLayout(form_box)
        answer = QtWidgets.QFormLayout(answer_box)
        for f in (form, answer):
            f.setContentsMargins(0, 0, 0, 0)
            f.setFieldGrowthPolicy(QtWidgets.QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.gpu = Picker()  # "live: NVIDIA GeForce RTX 4090" ends in "…" in a narrow window
        self.model = Picker()
        self.context = Picker()
        self.cache = Picker()
        group = None
        for g in self._gpus:
            if group is not None and g.group != group:
                self.gpu.insertSeparator(self.gpu.count())
            group = g.group
            self.gpu.addItem(g.name, g)
        for key, p in self._presets.items():
            self.model.addItem(f"{p.display_name} ({p.quantization})", key)
        for c in CONTEXTS:
            self.context.addItem(fmt.ctx_label(c), c)
        self.context.setCurrentIndex(CONTEXTS.index(32768))
        for cache in CACHE_CHOICES:
            if cache in CACHE_TYPES:
                self.cache.addItem(cache, cache)
        form.addRow("Device", self.gpu)
        form.addRow("Model", self.model)
        form.addRow("Context", self.context)
        form.addRow("KV cache type", self.cache)
        self.kv, self.ceiling_at = text_label(), text_label()  # the answers; where each comes from on hover
        self.verdict = Verdict()
        answer.addRow("KV cache", self.kv)
        answer.addRow("Ceiling at context", self.ceiling_at)
        answer.addRow("Fits?", self.verdict)
        for cb in (self.gpu, self.model, self.context, self.cache):
            cb.setSizeAdjustPolicy(QtWidgets.QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            cb.setMinimumContentsLength(14)
        self._top.addWidget(form_box, 3)
        self._top.addWidget(answer_box, 2)
        self.plot = make_plot("What-if: ceiling vs context", "context", "tokens", "ceiling", "tok/s",
                              axis_items={"bottom": TokenAxis(orientation="bottom")})
        style_axes(self.plot)
        self.curve = add_curve(self.plot, "ceiling", width=2.0)
        lay.addWidget(self.plot, 1)
        for cb in (self.gpu, self.model, self.context, self.cache):
            cb.currentIndexChanged.connect(self.recompute)  # (each says its whole choice on hover)
        self.gpu.setToolTip(self.gpu.currentText())
        self.model.setToolTip(self.model.currentText())
        self.result: WhatIfResult | None = None
        self.recompute()

    def resizeEvent(self, e: QtGui.QResizeEvent) -> None:
        """Pickers and answer side by side in a wide panel, one above the other in a narrow one."""
        super().resizeEvent(e)
        want = (QtWidgets.QBoxLayout.Direction.LeftToRight if e.size().width() >= SIDE_BY_SIDE_PX
                else QtWidgets.QBoxLayout.Direction.TopToBottom)
        if self._top.direction() != want:
            self._top.setDirection(want)

    def set_live(self, s: Snapshot) -> None:
        """Offer the live GPU and the live model as the first choices (once they are known)."""
        changed = False
        g = live_gpu(s)
        if g is not None and g != self._live:
            if self._live is None:
                self.gpu.insertItem(0, g.name, g)
                self.gpu.setCurrentIndex(0)
            else:
                self.gpu.setItemText(0, g.name)
                self.gpu.setItemData(0, g)
                changed = self.gpu.currentIndex() == 0
            self._live = g
        lm = live_model(s)
        if lm is not None and lm != self._live_model:
            first = self._live_model is None
            self._live_model = lm
            if first:
                with QtCore.QSignalBlocker(self.model):
                    self.model.insertItem(0, lm.label, LIVE)
                    self.model.setCurrentIndex(0)
                self.model.setToolTip(lm.label)
                if lm.kv_type is not None and self.cache.findData(lm.kv_type) >= 0:
                    with QtCore.QSignalBlocker(self.cache):
                        self.cache.setCurrentIndex(self.cache.findData(lm.kv_type))
                changed = True
            else:
                self.model.setItemText(0, lm.label)
                changed = changed or self.model.currentIndex() == 0
        if changed:
            self.recompute()

    @staticmethod
    def _fit_tip(gpu: GpuChoice | None) -> str:
        where = {"CPU": "host RAM", "Apple": "unified memory (the GPU may wire ~2/3 to 3/4 of it)"}.get(
            gpu.group if gpu else "", "VRAM")
        return f"Weights + KV allocation vs {where} (compute buffers not counted)"

    def recompute(self) -> None:
        """Run the calculator for the current picks and show the answer."""
        gpu: GpuChoice | None = self.gpu.currentData()
        key = self.model.currentData()
        model: Mapping[str, Any] | ModelShape | None = None
        weight_bytes = 0
        if key == LIVE and self._live_model is not None:
            model, weight_bytes = self._live_model.shape, self._live_model.weight_bytes
        elif key is not None and key in self._presets:
            preset = self._presets[key]
            model, weight_bytes = preset.metadata, preset.weight_bytes
        if gpu is None or model is None:
            self.result = WhatIfResult(reason="no model presets available" if model is None else "no GPU chosen")
        else:
            self.result = compute_whatif(gpu, model, weight_bytes, self.context.currentData(),
                                         self.cache.currentData())
        r = self.result
        if r.reason:
            set_text(self.kv, fmt.DASH, r.reason)
            set_text(self.ceiling_at, fmt.DASH, r.reason)
            self.verdict.set("", r.reason, r.reason)
            self.curve.setData([], [])
            return
        set_text(self.kv, fmt.bytes_(r.kv_allocated_bytes),
                 "KV cache allocated at this context and cache type (computed)")
        set_text(self.ceiling_at, fmt.tok_s(r.ceiling_at_ctx_tok_s),
                 "Decode ceiling at this depth: bandwidth ÷ (weights read per token + KV read per token), computed")
        if r.fits:
            self.verdict.set("fits", f"up to {fmt.tokens(r.max_context_fitting)} before spilling",
                             self._fit_tip(gpu), "ok")
        else:
            self.verdict.set("spills", f"by {fmt.bytes_(r.over_bytes)} · max {fmt.tokens(r.max_context_fitting)} "
                             "fits", self._fit_tip(gpu), "critical")
        set_xy(self.curve, r.curve)
        if r.curve:
            self.plot.getPlotItem().setYRange(0, nice_ceiling(max(y for _x, y in r.curve) * 1.05), padding=0)
            self.plot.getPlotItem().setXRange(0, float(r.curve[-1][0]), padding=0.02)
