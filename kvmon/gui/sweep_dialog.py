"""Tools ▸ Measure speed at every depth…: the depth sweep of the shown server in a dialog.

It says first what the sweep will cost (the depths, the prompt tokens to read, the KV cache at the deepest depth,
and, after one short request, the time at the prefill rate measured), or why it is refused; Start runs it on a
thread of its own with a progress bar and the time left; Cancel stops it at once (the server's request is cancelled
too). The points appear on the plot and in the table as they are measured; when it ends they join the atlas of
measured curves, so the dashboard's speed-vs-context plot shows them with a marker of their own and fits the forecast
on them. The picture, CSV and JSON can be saved.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from PySide6 import QtCore, QtWidgets

from kvmon.app.atlas import remember_sweep
from kvmon.app.sweep import DepthSweep, Progress, backend_words, target_for
from kvmon.core.snapshot import Snapshot
from kvmon.core.sweep import DEFAULT_GENERATE, DEFAULT_STEPS, SweepFailed, SweepPlan, SweepResult, plan_sweep
from kvmon.core.sweep_table import to_csv, to_json
from kvmon.core.units import fmt_duration
from kvmon.gui.curves_plot import CurvesDialog, CurvesPlot, say, sweep_caption


class _Bridge(QtCore.QObject):
    """Carries the sweep thread's news to the dialog (queued onto the GUI thread)."""

    progress = QtCore.Signal(object)
    calibrated = QtCore.Signal(object)  # the seconds the sweep will take, or the reason it cannot start (str)
    finished = QtCore.Signal(object)


class SweepDialog(CurvesDialog):
    """One sweep of the server ``monitor`` watches, from its reading ``snap``."""

    save_title = "Save the sweep"

    def __init__(self, parent: QtWidgets.QWidget | None, snap: Snapshot | None, monitor: Any,
                 api_key: str | None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Measure speed at every depth")
        self.snap, self.monitor, self.api_key = snap, monitor, api_key
        self.curves = getattr(monitor, "curves", None)  # the session's side of the atlas
        self.sweep: DepthSweep | None = None
        self.sweep_result: SweepResult | None = None
        self._rates: tuple[float | None, float | None] | None = None  # measured by the calibration
        self._bridge = _Bridge(self)
        self._bridge.progress.connect(self._on_progress)
        self._bridge.calibrated.connect(self._on_calibrated)
        self._bridge.finished.connect(self._on_finished)
        self._build()
        self._replan()

    # -- layout ---------------------------------------------------------------------------------------------
    def _build(self) -> None:
        lay = QtWidgets.QVBoxLayout(self)
        s = self.snap
        what = f"{s.model.name or 'the model'} on {s.url}" if s is not None and s.server_read else "no server read yet"
        self.heading = QtWidgets.QLabel(f"Decode and prefill at every depth of {what}, in one conversation that "
                                        "grows from empty (the server's prompt cache keeps each step).", wordWrap=True)
        lay.addWidget(self.heading)
        form = QtWidgets.QFormLayout()
        n_ctx = s.model.n_ctx if s is not None and s.model.n_ctx else 8192
        # each value after its range: a value set first is cut to the default maximum (99)
        self.to = QtWidgets.QSpinBox(minimum=2, maximum=max(2, n_ctx), singleStep=1024,
                                     value=max(2, n_ctx - DEFAULT_GENERATE))
        self.to.setGroupSeparatorShown(True)
        self.steps = QtWidgets.QSpinBox(minimum=1, maximum=64, value=DEFAULT_STEPS)
        self.generate = QtWidgets.QSpinBox(minimum=2, maximum=4096, value=DEFAULT_GENERATE)
        self.spill = QtWidgets.QCheckBox("even where the KV cache spills out of the device's memory")
        form.addRow("Deepest depth (tokens)", self.to)
        form.addRow("Depths beyond empty", self.steps)
        form.addRow("Tokens timed at each", self.generate)
        form.addRow("Measure", self.spill)
        lay.addLayout(form)
        self.plan_text = QtWidgets.QLabel(wordWrap=True, textFormat=QtCore.Qt.TextFormat.PlainText)
        lay.addWidget(self.plan_text)
        self.bar = QtWidgets.QProgressBar(maximum=1000, textVisible=False)
        self.status = QtWidgets.QLabel(" ")
        lay.addWidget(self.bar)
        lay.addWidget(self.status)
        self.plot = CurvesPlot(self)
        lay.addWidget(self.plot, 1)
        self.start_button = QtWidgets.QPushButton("Start")
        self.cancel_button = QtWidgets.QPushButton("Cancel sweep")
        lay.addLayout(self.buttons([self.start_button, self.cancel_button], ["png", "csv", "json"]))
        self.start_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.cancel)
        for w in (self.to, self.steps, self.generate):
            w.valueChanged.connect(lambda _v: self._replan())
        self.spill.toggled.connect(lambda _v: self._replan())
        self.cancel_button.setEnabled(False)
        self.resize(900, 760)

    # -- the plan ---------------------------------------------------------------------------------------------
    def plan(self) -> SweepPlan | None:
        s = self.snap
        if s is None:
            return None
        backend = backend_words(str(s.backend) if s.backend else None)
        return plan_sweep(s, backend, self.to.value(), self.steps.value(), self.generate.value(),
                          allow_spill=self.spill.isChecked())

    def _replan(self) -> None:
        plan = self.plan()
        if plan is None:
            say(self.plan_text, "No server has been read yet: the sweep needs one reading of it first.", warn=True)
        elif plan.refusal:
            say(self.plan_text, f"Refused: {plan.refusal}.", warn=True)
        else:
            say(self.plan_text, "\n".join(plan.cost_lines(*self._rates or ())))
        # while the sweep runs its settings are off, so nothing plans again until it has ended
        self.start_button.setEnabled(plan is not None and not plan.refusal and self.sweep_result is None
                                     and self._rates is not None)
        if plan is not None and not plan.refusal and self.sweep is None:
            QtCore.QTimer.singleShot(0, self.calibrate)  # the time it will take: one short request, said first

    def calibrate(self) -> None:
        """One short request (the start of the sweep's own conversation) measures the rates the time is said at."""
        plan = self.plan()
        if plan is None or plan.refusal or self.snap is None or self.sweep is not None:
            return
        try:
            target = target_for(self.monitor, self.snap, self.api_key)
            self.sweep = DepthSweep(target, plan, self.snap, on_progress=self._bridge.progress.emit)
        except SweepFailed as exc:
            say(self.plan_text, f"Refused: {exc}.", warn=True)
            return
        self.status.setText("Measuring the prefill rate (one short request)…")
        sweep = self.sweep

        def run() -> None:
            try:
                self._bridge.calibrated.emit(sweep.calibrate())
            except SweepFailed as exc:
                self._bridge.calibrated.emit(str(exc))

        threading.Thread(target=run, name="kvmon-sweep-calibrate", daemon=True).start()

    def _on_calibrated(self, secs: object) -> None:
        if isinstance(secs, str):
            self.status.setText(f"The sweep cannot start: {secs}")
            return
        assert self.sweep is not None
        self._rates = (self.sweep.prefill_tok_s, self.sweep.decode_tok_s)
        self.status.setText("Ready." if secs is None else f"Ready: it will take {fmt_duration(float(secs))}.")  # type: ignore[arg-type]
        self._replan()

    # -- the sweep --------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Run the sweep on its own thread (its plan as set now)."""
        plan = self.plan()
        if plan is None or plan.refusal or self.sweep is None or self.snap is None:
            return
        self.sweep.plan = plan  # the depths may have changed since the rates were measured
        for w in (self.to, self.steps, self.generate, self.spill, self.start_button):
            w.setEnabled(False)
        self.cancel_button.setEnabled(True)
        sweep = self.sweep
        threading.Thread(target=lambda: self._bridge.finished.emit(sweep.run()), name="kvmon-sweep",
                         daemon=True).start()

    def cancel(self) -> None:
        """Stop the sweep now; the server's request is cancelled too."""
        if self.sweep is not None:
            self.cancel_button.setEnabled(False)
            self.status.setText("Cancelling…")
            self.sweep.cancel()

    def _on_progress(self, p: Progress) -> None:
        if p.phase == "calibrating":
            return
        self.bar.setValue(round(min(1.0, p.depth_tokens / p.deepest) * 1000) if p.deepest else 0)
        eta = "" if p.eta_s is None else f" · {fmt_duration(p.eta_s)} left"
        doing = {"reading": "reading the prompt", "generating": "generating"}.get(p.phase, p.phase)
        self.status.setText(f"{doing} at depth {p.depth_tokens:,} of {p.deepest:,} · {p.step} of {p.steps} depths "
                            f"measured{eta}")
        if p.rows and self.snap is not None:
            self.plot.show_sweep(SweepResult(self.snap.url or "", None, None, self.snap.model.name, None, 0, p.rows,
                                             self.snap.ceiling_curve))

    def _on_finished(self, result: SweepResult) -> None:
        self.sweep_result = result
        self.cancel_button.setEnabled(False)
        self.bar.setValue(1000 if result.outcome == "done" else self.bar.value())
        ended = {"done": "Done", "cancelled": "Cancelled", "failed": "Stopped"}[result.outcome]
        why = f": {result.reason}" if result.outcome == "failed" and result.reason else ""
        self.status.setText(f"{ended}{why} · {fmt_duration(result.wall_s, approx=False)}, deepest depth "
                            f"{result.depth_reached:,}")
        if result.rows:
            self.plot.show_sweep(result)
            for b in self.save_buttons:
                b.setEnabled(True)
        problem = remember_sweep(result, self.curves)
        if problem:
            self.status.setText(f"{self.status.text()} · not remembered: {problem}")

    def default_name(self, kind: str) -> str:
        from kvmon.gui.caption import default_filename

        return default_filename(self.snap, kind, what="sweep")

    def contents(self, kind: str) -> str | None:
        r = self.sweep_result
        if r is None or self.snap is None:
            return None
        if kind == "png":
            return sweep_caption(r, self.snap)
        return to_csv(r) if kind == "csv" else json.dumps(to_json(r), indent=2, ensure_ascii=False)

    def closeEvent(self, event: Any) -> None:
        if self.sweep is not None and self.sweep_result is None:
            self.sweep.cancel()  # closing the dialog stops the sweep: the server is left idle
        super().closeEvent(event)
