"""How bad a poll is, decided once: each connection status's level and words, the worst alert, the worst of both.

The alerts panel, the status bar, the server tabs, the tray, the server list and the group view all read these, so
one state is never a warning in one place and an error in another. A model that is loading, a server asleep (its
model unloaded) or paused is information, not trouble; a timeout or an odd answer is a warning (kvmon reconnects);
a server gone, a rejected key or a bad URL is critical (it needs the user).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kvmon.core.snapshot import Alert, AlertLevel, ConnectionStatus, Snapshot

# status -> (level, what the alerts panel says); None: the server was read, nothing to say
STATUS_SEVERITY: Mapping[ConnectionStatus, tuple[AlertLevel, str] | None] = {
    ConnectionStatus.CONNECTED: None,
    ConnectionStatus.REPLAY: None,
    ConnectionStatus.CONNECTING: (AlertLevel.INFO, "Connecting…"),
    ConnectionStatus.LOADING: (AlertLevel.INFO, "Model loading…"),
    ConnectionStatus.SLEEPING: (AlertLevel.INFO, "Server sleeping (model unloaded)"),
    ConnectionStatus.PAUSED: (AlertLevel.INFO, "Paused (Space to resume)"),
    ConnectionStatus.TIMEOUT: (AlertLevel.WARNING, "Server not answering — reconnecting"),
    ConnectionStatus.BAD_RESPONSE: (AlertLevel.WARNING, "Unexpected answer from the server"),
    ConnectionStatus.UNREACHABLE: (AlertLevel.CRITICAL, "Server gone — reconnecting"),
    ConnectionStatus.AUTH_REJECTED: (AlertLevel.CRITICAL, "API key rejected — set it in Settings (Ctrl+,)"),
    ConnectionStatus.BAD_URL: (AlertLevel.CRITICAL, "Bad URL — fix it in Settings (Ctrl+,)"),
}


def status_level(status: ConnectionStatus) -> AlertLevel | None:
    """The level of a connection status (None: read, nothing wrong)."""
    entry = STATUS_SEVERITY[status]
    return entry[0] if entry is not None else None


def worst_alert(alerts: Iterable[Alert], at_least: AlertLevel = AlertLevel.INFO) -> Alert | None:
    """The most severe alert at ``at_least`` or above (the first of equals), or None."""
    return max((a for a in alerts if a.level.rank >= at_least.rank), key=lambda a: a.level.rank, default=None)


def worse(a: AlertLevel | None, b: AlertLevel | None) -> AlertLevel | None:
    """The more severe of two levels (None is below info)."""
    return max((x for x in (a, b) if x is not None), key=lambda x: x.rank, default=None)


def worst_level(s: Snapshot) -> AlertLevel | None:
    """How bad this poll is: the worse of its connection status and its worst alert (None: nothing to say)."""
    alert = worst_alert(s.alerts)
    return worse(status_level(s.connection.status), alert.level if alert is not None else None)
