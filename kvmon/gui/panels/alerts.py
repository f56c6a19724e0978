"""Alerts and advice: the connection first when the server is not read (one line for one cause), then the alerts
most severe first, one line each: Qt's own labels in plain text, a mark in the level's colour beside each."""

from __future__ import annotations

from PySide6 import QtCore, QtWidgets

from kvmon.core.alert_types import CONNECTION, AlertThresholds
from kvmon.core.severity import STATUS_SEVERITY
from kvmon.core.snapshot import ConnectionStatus, Snapshot
from kvmon.core.words import alert_name, cause_name, level_word
from kvmon.gui import fmt, theme

# the connection states the panel names, with their level (the one table in ``kvmon.core.severity``)
STATE_TEXT: dict[ConnectionStatus, tuple[str, str]] = {
    status: (entry[0].value, entry[1]) for status, entry in STATUS_SEVERITY.items() if entry is not None
}

NO_ALERTS = "No alerts."


def coded_lines(s: Snapshot) -> list[tuple[str, str, str, str | None]]:
    """(level, text, tooltip, alert code or None) of each line the panel shows for a snapshot, in plain words
    (commands without backticks); the code is no part of what is shown."""
    out: list[tuple[str, str, str, str | None]] = []
    st = STATE_TEXT.get(s.connection.status)
    merged = any(a.code == CONNECTION for a in s.alerts)  # the failing connection's own alert: one line, not two
    if st is not None and not merged:
        level, text = st
        reason = s.connection.reason or ""
        retry = f" (retry in {s.connection.retry_in_s:.0f} s)" if s.connection.retry_in_s else ""
        line = f"{text.removesuffix('…')}: {reason}{retry}" if reason else f"{text}{retry}"  # not "loading…: …"
        out.append((level, line, f"Connection: {level_word(level)}", None))
    serving = s.serving.message if s.serving is not None else None
    if serving and not (st is not None and serving in (s.connection.reason or "")):
        out.append(("info", serving, "The state of the router's (or llama-swap's) models", None))
    for a in sorted(s.alerts, key=lambda a: -a.level.rank):  # most severe first; stable within a level
        out.append((a.level.value, fmt.plain(a.message), f"{alert_name(a.code)} ({level_word(a.level.value)})",
                    a.code))
    for c in s.slowdown_causes:  # why decode runs below the ceiling: one line each, the largest share first
        share = (f" (~{round(c.share * 20) * 5}% of the gap to the ceiling)" if c.share is not None
                 and c.code != "unexplained" else "")
        out.append(("info", f"{fmt.plain(c.message)}{share}", f"Why below the ceiling: {cause_name(c.code)}", None))
    codes = {a.code for a in s.alerts}
    metrics_reason = s.reasons.get("metrics")
    if metrics_reason and not any("metrics" in c for c in codes):
        out.append(("info", metrics_reason, "Why some counters are missing", None))
    return out


HOLD_S = AlertThresholds.min_hold_s  # a line that went keeps its room as long as a raised alert is held


class AlertLine(QtWidgets.QWidget):
    """One line: the level's mark in its colour, and the words in plain text (wrapped)."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QtWidgets.QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(6)
        self.mark = QtWidgets.QLabel()
        self.mark.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.mark.setAlignment(QtCore.Qt.AlignmentFlag.AlignTop)
        self.text = QtWidgets.QLabel()
        self.text.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.text.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Preferred)
        self.text.setAlignment(QtCore.Qt.AlignmentFlag.AlignTop | QtCore.Qt.AlignmentFlag.AlignLeft)
        lay.addWidget(self.mark, 0)
        lay.addWidget(self.text, 1)
        self.level = ""

    def set(self, level: str, text: str, tip: str) -> None:
        """Show a line; each part is set only when it changed (a number in a message moves most polls)."""
        if level != self.level:
            self.level = level
            self.mark.setText(theme.mark(level))
            theme.tint(self.mark, level)
        if text != self.text.text():
            self.text.setText(text)
        if tip != self.toolTip():
            self.setToolTip(tip)


class AlertsPanel(QtWidgets.QGroupBox):
    """Plain-text lines with a coloured mark each; made again only when the lines change."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__("Alerts and advice", parent)
        self._lay = QtWidgets.QVBoxLayout(self)
        self._lay.setContentsMargins(6, 2, 6, 4)
        self._lay.setSpacing(1)
        self._rows: list[AlertLine] = []
        self._lines: list[tuple[str, str, str, str | None]] | None = None
        self._fewer_since: float | None = None  # when the lines became fewer than the rows kept for them

    def _show(self, rows: list[tuple[str, str, str]], now: float | None = None) -> None:
        """The lines, in the widgets already there (new ones only for more lines than before). A line that went
        keeps its room, blank, for ``HOLD_S`` of the session's time, so a line that comes and goes between polls
        does not move the window."""
        while len(self._rows) < len(rows):
            w = AlertLine()
            policy = w.sizePolicy()
            policy.setRetainSizeWhenHidden(True)
            w.setSizePolicy(policy)
            self._rows.append(w)
            self._lay.addWidget(w, 0, QtCore.Qt.AlignmentFlag.AlignTop)
        for w, (level, text, tip) in zip(self._rows, rows, strict=False):
            w.set(level, text, tip)
            w.setVisible(True)
        for w in self._rows[len(rows):]:
            w.setVisible(False)
        if len(rows) >= len(self._rows):
            self._fewer_since = None
        elif self._fewer_since is None:
            self._fewer_since = now
        self._drop_blank_rows(len(rows), now)

    def _drop_blank_rows(self, shown: int, now: float | None) -> None:
        """Give back the room of lines gone for ``HOLD_S`` (at once without a time: a message in their place)."""
        if len(self._rows) <= shown or (now is not None and self._fewer_since is not None
                                        and now - self._fewer_since < HOLD_S):
            return
        while len(self._rows) > shown:
            w = self._rows.pop()
            self._lay.removeWidget(w)
            w.deleteLater()
        self._fewer_since = None

    def text(self) -> str:
        """The lines as they read, one per line."""
        return "\n".join(w.text.text() for w in self._rows if not w.isHidden())

    def show_text(self, text: str, tooltip: str) -> None:
        """A plain message in place of the alert lines (e.g. before the first poll)."""
        self._lines = None
        self._show([("info", text.lstrip("● "), tooltip)])

    @property
    def lines(self) -> list[tuple[str, str, str]]:
        """(level, text, tooltip) of each line shown (none before the first snapshot)."""
        return [(level, text, tip) for level, text, tip, _code in self._lines or []]

    @property
    def codes(self) -> list[str | None]:
        """The alert code of each line shown (None: the connection's, the server's or a note)."""
        return [code for *_rest, code in self._lines or []]

    def update_snapshot(self, s: Snapshot) -> None:
        """Render the alert lines of one snapshot: the rows change only where the lines did."""
        lines = coded_lines(s)
        if lines == self._lines:
            self._drop_blank_rows(len(lines) or 1, s.t_monotonic)
            return
        self._lines = lines
        calm = [("ok", NO_ALERTS, "Alerts rise with hysteresis when a threshold is crossed and computed advice "
                                  "applies.")]
        self._show([(level, text, tip) for level, text, tip, _code in lines] or calm, s.t_monotonic)
