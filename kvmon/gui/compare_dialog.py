"""File ▸ Compare…: two measured curves on one speed-vs-context plot, chosen among the atlas's configurations or
opened from a sweep's JSON or a recording, each named by what differs between them, with both ceilings and the table
of both at the common depths; the picture and the CSV can be saved."""

from __future__ import annotations

from PySide6 import QtWidgets

from kvmon import __version__
from kvmon.app.compare import CompareError, atlas_configs, load_curve
from kvmon.app.sweep import backend_words
from kvmon.core.compare import Curve, common_rows, named, table_lines, to_csv
from kvmon.gui.curves_plot import CurvesDialog, CurvesPlot, say

OPEN_FILE = "Open a sweep or recording…"


class CompareDialog(CurvesDialog):
    """Two pickers (the atlas's configurations, or a file) and the plot of both."""

    save_title = "Save the comparison"

    def __init__(self, parent: QtWidgets.QWidget | None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Compare measured curves")
        self.curves: list[Curve | None] = [None, None]
        self.shown: tuple[Curve, Curve, str] | None = None
        lay = QtWidgets.QVBoxLayout(self)
        form = QtWidgets.QFormLayout()
        self.pickers = [QtWidgets.QComboBox(), QtWidgets.QComboBox()]
        try:
            configs = atlas_configs()
        except CompareError as exc:
            configs, note = [], str(exc)
        else:
            note = "" if configs else "The atlas of measured curves is empty: run a sweep, or open a file."
        for n, picker in enumerate(self.pickers):
            picker.setSizeAdjustPolicy(QtWidgets.QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            picker.setMinimumContentsLength(40)
            for c in configs:
                picker.addItem(f"{c.config.label(backend_words)} — {c.points} points to {c.deepest_tokens:,}")
            picker.addItem(OPEN_FILE)
            picker.setCurrentIndex(min(n, len(configs)))  # A and B the two newest, or a file to open
            picker.activated.connect(lambda idx, n=n: self._picked(n, idx))
            form.addRow("AB"[n], picker)
        lay.addLayout(form)
        self.message = QtWidgets.QLabel(note, wordWrap=True)
        lay.addWidget(self.message)
        self.plot = CurvesPlot(self)
        lay.addWidget(self.plot, 1)
        lay.addLayout(self.buttons([], ["png", "csv"]))
        self.resize(980, 720)
        for n, picker in enumerate(self.pickers):
            if picker.currentText() != OPEN_FILE:
                self.curves[n] = self._load(f"atlas:{picker.currentIndex() + 1}")
        self._draw()

    def _load(self, spec: str) -> Curve | None:
        try:
            return load_curve(spec)
        except CompareError as exc:
            say(self.message, str(exc), warn=True)
            return None

    def _picked(self, n: int, idx: int) -> None:
        """Curve ``n`` (0: A, 1: B) from the atlas, or from a sweep's JSON or a recording opened."""
        if self.pickers[n].itemText(idx) != OPEN_FILE:
            self.curves[n] = self._load(f"atlas:{idx + 1}")  # atlas:N numbers the configurations from 1
            self._draw()
            return
        path, _f = QtWidgets.QFileDialog.getOpenFileName(self, "Open a sweep or a recording", "",
                                                         "Sweeps and recordings (*.json *.jsonl)")
        curve = self._load(path) if path else None
        if curve is not None:
            self.curves[n] = curve
            self._draw()

    def _draw(self) -> None:
        a, b = self.curves
        for button in self.save_buttons:
            button.setEnabled(a is not None and b is not None)
        if a is None or b is None:
            return
        a, b, title = named(a, b, backend_words)
        rows = common_rows(a, b)
        self.shown = (a, b, title)
        self.plot.show_curves([a, b], title, table_lines(a, b, rows) if rows else ["the two curves share no depths"])
        say(self.message, f"A: {a.source} · B: {b.source}")

    def default_name(self, kind: str) -> str:
        return f"kvmon-compare.{kind}"

    def contents(self, kind: str) -> str | None:
        if self.shown is None:
            return None
        a, b, title = self.shown
        if kind == "png":
            return " · ".join((title, f"{a.label}: {a.source}", f"{b.label}: {b.source}", f"kvmon {__version__}"))
        return to_csv(a, b, common_rows(a, b))
