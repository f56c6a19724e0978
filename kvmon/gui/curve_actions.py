"""The window's commands on measured curves: Tools ▸ Measure speed at every depth… and File ▸ Compare…. Mixed into
the main window; the controller gives it ``monitor_of`` (the shown server's monitor and key, what a sweep drives)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6 import QtWidgets


class CurveActions:
    """Open the sweep and compare dialogs."""

    monitor_of: Callable[[], tuple[Any, str | None]] | None = None

    def open_sweep(self) -> QtWidgets.QDialog:
        """The depth sweep of the server shown now."""
        from kvmon.gui.sweep_dialog import SweepDialog

        monitor, key = self.monitor_of() if self.monitor_of is not None else (None, None)
        dlg = SweepDialog(self, self.store.last, monitor, key)  # type: ignore[attr-defined, arg-type]
        dlg.show()
        return dlg

    def open_compare(self) -> QtWidgets.QDialog:
        """Two measured curves side by side."""
        from kvmon.gui.compare_dialog import CompareDialog

        dlg = CompareDialog(self)  # type: ignore[arg-type]
        dlg.show()
        return dlg
