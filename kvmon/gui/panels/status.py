"""Status bar: connection · polled N s ago · sources · recording ●."""

from __future__ import annotations

import time

from PySide6 import QtWidgets

from kvmon.core.alerts import RECORDING_FAILED
from kvmon.core.snapshot import ConnectionStatus, Snapshot
from kvmon.gui import theme
from kvmon.gui.widgets import ValueLabel

JUST_NOW_S = 1.5  # a snapshot younger than this is "polled just now"; older ones count seconds


def sources_text(s: Snapshot) -> str:
    """Which kinds of provenance the numbers on screen have, e.g. 'measured · computed · log'."""
    kinds: list[str] = []
    for v in s.provenance.values():
        if v not in kinds:
            kinds.append(v)
    rate = f"rate from {s.decode_rate_source}" if s.decode_rate_source else None
    return " · ".join([*(sorted(kinds)), *([rate] if rate else [])]) or "no sources yet"


class StatusPanel(QtWidgets.QStatusBar):
    """Permanent widgets updated only when their text changes; the 'ago' text ticks at most once a second."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.connection = ValueLabel()
        self.polled = ValueLabel()
        self.sources = ValueLabel()
        self.recording = ValueLabel()
        for w in (self.connection, self.polled, self.sources):
            self.addWidget(w)
        self.addPermanentWidget(self.recording)
        self._last_poll_monotonic: float | None = None
        self._recording_path: str | None = None
        self._recording_failed: str | None = None  # the alert's message while the recording is stopped by a fault
        self.set_recording(None)

    def update_snapshot(self, s: Snapshot) -> None:
        """Render connection state and sources of one snapshot."""
        st = s.connection.status
        c = theme.hex_color("ok" if s.server_read else "warning" if st in (ConnectionStatus.CONNECTING,
                                                                          ConnectionStatus.LOADING,
                                                                          ConnectionStatus.PAUSED) else "critical")
        url = f" · {s.url}" if s.url else ""
        self.connection.set(f"<span style='color:{c}'>●</span> {st.value.replace('_', ' ')}{url}",
                            s.connection.reason or f"Connection: {st.value}")
        self.sources.set(sources_text(s), "Where the numbers come from: measured (server counters, NVML), computed "
                         "(physics), log, table, user settings")
        failed = next((a.message for a in s.alerts if a.code == RECORDING_FAILED), None)
        if failed != self._recording_failed:
            self._recording_failed = failed
            self.set_recording(self._recording_path)
        self._last_poll_monotonic = time.monotonic()
        self.tick()

    def tick(self) -> None:
        """Refresh the 'polled N s ago' text (called by the window's timer once a poll is late)."""
        if self._last_poll_monotonic is None:
            self.polled.set("not polled yet")
            return
        ago = time.monotonic() - self._last_poll_monotonic
        self.polled.set(f"polled {ago:.0f} s ago" if ago >= JUST_NOW_S else "polled just now",
                        "Time since the last snapshot arrived from the poller thread")

    def set_recording(self, path: str | None) -> None:
        """Show whether snapshots are being recorded, and when a fault (a full disk) stopped the recording."""
        if path != self._recording_path:
            self._recording_failed = None  # a new recording (or none) starts clean
        self._recording_path = path
        if path and self._recording_failed:
            self.recording.set(f"recording failed <span style='color:{theme.hex_color('critical')}'>●</span>",
                               self._recording_failed)
        elif path:
            self.recording.set(f"recording <span style='color:{theme.hex_color('spill')}'>●</span>",
                               f"Recording every snapshot to {path}")
        else:
            self.recording.set("not recording", "Start with --record FILE.jsonl to record this session")
