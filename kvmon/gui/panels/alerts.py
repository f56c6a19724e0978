"""Alerts and advice: connection state first when not connected, then alerts most severe first, one line each."""

from __future__ import annotations

import html

from PySide6 import QtCore, QtWidgets

from kvmon.core.severity import STATUS_SEVERITY
from kvmon.core.snapshot import Alert, ConnectionStatus, Snapshot
from kvmon.gui import fmt, theme
from kvmon.gui.labels import WrapLabel

# the connection states the panel names, with their level (the one table in ``kvmon.core.severity``)
STATE_TEXT: dict[ConnectionStatus, tuple[str, str]] = {
    status: (entry[0].value, entry[1]) for status, entry in STATUS_SEVERITY.items() if entry is not None
}

_ICON = {"info": "●", "warning": "▲", "critical": "■"}


def sorted_alerts(alerts: tuple[Alert, ...]) -> list[Alert]:
    """Most severe first; stable within a level."""
    return sorted(alerts, key=lambda a: -a.level.rank)


def lines_for(s: Snapshot) -> list[tuple[str, str, str]]:
    """(level, text, tooltip) lines the panel shows for a snapshot."""
    out: list[tuple[str, str, str]] = []
    st = STATE_TEXT.get(s.connection.status)
    if st is not None:
        level, text = st
        reason = s.connection.reason or ""
        retry = f" (retry in {s.connection.retry_in_s:.0f} s)" if s.connection.retry_in_s else ""
        line = f"{text}{': ' + reason if reason else ''}{retry}"
        out.append((level, line, f"Connection: {s.connection.status.value}"))
    serving = s.serving.message if s.serving is not None else None
    if serving and not (st is not None and serving in (s.connection.reason or "")):
        out.append(("info", serving, "The state of the router's (or llama-swap's) models"))
    for a in sorted_alerts(s.alerts):
        val = f"\nValue: {a.value:g}" if a.value is not None else ""
        out.append((a.level.value, a.message, f"{a.level.value} · {a.code}{val}"))
    codes = {a.code for a in s.alerts}
    metrics_reason = s.reasons.get("metrics")
    if metrics_reason and not any("metrics" in c for c in codes):
        out.append(("info", metrics_reason, "Why some counters are missing"))
    return out


class AlertsPanel(QtWidgets.QGroupBox):
    """Rich-text lines coloured by level; rebuilt only when the lines change."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__("Alerts and advice", parent)
        lay = QtWidgets.QVBoxLayout(self)
        lay.setContentsMargins(6, 2, 6, 4)
        self.label = WrapLabel()
        self.label.setAlignment(QtCore.Qt.AlignmentFlag.AlignTop | QtCore.Qt.AlignmentFlag.AlignLeft)
        lay.addWidget(self.label)
        self._lines: list[tuple[str, str, str]] | None = None
        self._key: tuple[object, ...] | None = None  # what the lines were made from

    def show_text(self, text: str, tooltip: str) -> None:
        """A plain message in place of the alert lines (e.g. before the first poll)."""
        self._lines = self._key = None
        self.label.set(html.escape(text), tooltip)

    @property
    def lines(self) -> list[tuple[str, str, str]]:
        return list(self._lines or [])

    def update_snapshot(self, s: Snapshot) -> None:
        """Render the alert lines of one snapshot (made again only when the connection or an alert changed)."""
        key = (s.connection, s.alerts, s.reasons.get("metrics"), s.serving.message if s.serving else None)
        if key == self._key:
            return
        self._key = key
        lines = lines_for(s)
        if lines == self._lines:
            return
        self._lines = lines
        if not lines:
            self.label.set(f"<span style='color:{theme.hex_color('ok')}'>● No alerts.</span>",
                           "Alerts rise with hysteresis when a threshold is crossed and computed advice applies.")
            return
        rows = []
        code_bg = theme.hex_color("code")
        for level, text, _tip in lines:
            c = theme.hex_color(level)
            rows.append(f"<span style='color:{c}'>{_ICON.get(level, '●')}</span> {fmt.code_html(text, code_bg)}")
        self.label.set("<br>".join(rows), "\n".join(f"{fmt.plain(t)}: {tip}" for _l, t, tip in lines))
