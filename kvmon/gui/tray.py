"""Tray icon showing decode tok/s (of the busiest server when several are watched) on the verdict's colour when it
warns, its tooltip the headline's words, and a desktop notification when an alert of any of them rises (when a
tray exists)."""

from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.core.snapshot import Alert, AlertLevel, Snapshot, VerdictLevel
from kvmon.gui import fmt, theme


def rising_alerts(previous_codes: frozenset[str], alerts: tuple[Alert, ...]) -> list[Alert]:
    """Warning or critical alerts present now that were not present at the previous poll."""
    return [a for a in alerts if a.level.rank >= AlertLevel.WARNING.rank and a.code not in previous_codes]


def tray_text(decode_tok_s: float | None) -> str:
    """The two or three characters drawn on the icon."""
    if decode_tok_s is None:
        return "–"
    n = round(decode_tok_s)  # rounded before the test: 999.6 draws as "1k+", never as a four-digit "1000"
    return str(n) if n < 1000 else "1k+"


def tray_tip(s: Snapshot, label: str | None = None) -> tuple[str, str | None]:
    """The tooltip (the headline's words and the big number's) and the icon's colour: the verdict's level when it
    warns (a server gone is critical, as in the header), else None (the decode colour)."""
    v = s.verdict
    h = fmt.hero(s)
    head = f"kvmon{': ' + label if label else ''}"
    news = f"{v.state}: {v.sentence}" if v is not None else ""
    tip = "\n".join(x for x in (head, news, f"{h.number} {h.against}".strip()) if x)
    level = v.level.value if v is not None and v.level.rank >= VerdictLevel.WARNING.rank else None
    return tip, level


def icon_pixmap(text: str, level: str | None = None, size: int = 32) -> QtGui.QPixmap:
    """A square icon with the tok/s number on the decode colour (alert colour when an alert is up)."""
    pm = QtGui.QPixmap(size, size)
    pm.fill(QtCore.Qt.GlobalColor.transparent)
    with QtGui.QPainter(pm) as p:
        p.setBrush(theme.brush(level or "decode"))
        p.setPen(QtCore.Qt.PenStyle.NoPen)
        p.drawRoundedRect(0, 0, size, size, 6, 6)
        f = p.font()
        f.setBold(True)
        f.setPixelSize(int(size * (0.55 if len(text) <= 2 else 0.42)))
        p.setFont(f)
        p.setPen(QtGui.QColor("#000000"))
        p.drawText(pm.rect(), QtCore.Qt.AlignmentFlag.AlignCenter, text)
    return pm


class Tray(QtCore.QObject):
    """Owns the QSystemTrayIcon when the desktop has a tray; otherwise keeps state only."""

    activated = QtCore.Signal()

    def __init__(self, parent: QtCore.QObject | None = None) -> None:
        super().__init__(parent)
        self.available = QtWidgets.QSystemTrayIcon.isSystemTrayAvailable()
        self._text: str | None = None
        self._level: str | None = None
        self._tip: str | None = None
        self._codes: dict[str, frozenset[str]] = {}  # per server: the warning-or-worse codes at its last poll
        self.notified: list[str] = []  # messages shown (kept for tests and the log)
        self.icon: QtWidgets.QSystemTrayIcon | None = None
        self.menu: QtWidgets.QMenu | None = None
        if self.available:
            self.icon = QtWidgets.QSystemTrayIcon(QtGui.QIcon(icon_pixmap("–")), self)
            self.icon.activated.connect(lambda _r: self.activated.emit())
            self.icon.show()

    def set_menu(self, menu: QtWidgets.QMenu) -> None:
        """The icon's right-click menu (Show, Pause, Record, Quit: the window's own actions)."""
        self.menu = menu
        if self.icon is not None:
            self.icon.setContextMenu(menu)

    def show_snapshot(self, s: Snapshot, label: str | None = None) -> None:
        """Draw this server's decode speed (and worst alert colour) on the icon; ``label`` names it."""
        tip, level = tray_tip(s, label)
        text = tray_text(s.decode_tok_s)
        # each goes to the desktop's tray (a D-Bus call there) only when it changed: the tip's tenths move most
        # polls, the icon's whole tok/s less often, and a new icon is a pixmap drawn and sent
        if (text, level) != (self._text, self._level):
            self._text, self._level = text, level
            if self.icon is not None:
                self.icon.setIcon(QtGui.QIcon(icon_pixmap(text, level)))
        if tip != self._tip:
            self._tip = tip
            if self.icon is not None:
                self.icon.setToolTip(tip)

    def notify(self, key: str, s: Snapshot, label: str | None = None) -> None:
        """A desktop notification for each alert of this server that rose since its previous poll."""
        for a in rising_alerts(self._codes.get(key, frozenset()), s.alerts):
            plain = fmt.plain(a.message)  # a notification is plain text: no backticks around code
            message = f"{label}: {plain}" if label else plain
            self.notified.append(message)
            if self.icon is not None:
                kind = (QtWidgets.QSystemTrayIcon.MessageIcon.Critical if a.level is AlertLevel.CRITICAL
                        else QtWidgets.QSystemTrayIcon.MessageIcon.Warning)
                self.icon.showMessage("kvmon", message, kind, 8000)
        self._codes[key] = frozenset(a.code for a in s.alerts if a.level.rank >= AlertLevel.WARNING.rank)
