"""Status bar: connection · polled N s ago · where the key numbers came from, in a user's words · recording ●.

In a replay the first two give way to "replaying FILE · 10× · 12:04 of 48:10".
"""

from __future__ import annotations

import time

from PySide6 import QtGui, QtWidgets

from kvmon.core.alert_types import RECORDING_FAILED
from kvmon.core.severity import status_level
from kvmon.core.snapshot import Snapshot
from kvmon.core.words import bandwidth_source_words
from kvmon.gui import theme
from kvmon.gui.flow import FlowBox
from kvmon.gui.text import DotLabel, set_text, text_label

JUST_NOW_S = 1.5  # a snapshot younger than this is "polled just now"; older ones count seconds

# where a number came from (Provenance values), as a person would say it
PROVENANCE_WORDS = {
    "measured": "measured", "computed": "computed by kvmon", "user": "from your settings",
    "table": "from the published spec", "log": "from the server's log",
    "command_line": "from the server's command line",
    "default": "assumed (the server does not say)", "estimated": "estimated",
}
RATE_WORDS = {"slots": "rate from /slots", "metrics": "rate from /metrics",
              "child_slots": "rate from Ollama's llama-server /slots", "proxy": "rate from kvmon proxy",
              "replies": "rate of the replies that ended (server's timing)"}
# the fields the tooltip lists, in the order a person reads the screen
FIELD_WORDS = (("decode_tok_s", "decode speed"), ("prefill_tok_s", "prefill speed"),
               ("ceiling_tok_s", "ceiling"), ("context_tokens", "context in use"), ("n_ctx", "context size"),
               ("kv_type", "cache type"), ("kv_bytes_per_token", "KV bytes per token"),
               ("kv_allocated_bytes", "KV cache allocated"), ("kv_in_use_bytes", "KV cache in use"),
               ("weight_bytes", "weights"), ("weight_bytes_read_per_token", "weights read per token"),
               ("peak_bandwidth_bytes_per_s", "peak bandwidth"), ("efficiency", "efficiency"))


def sources_text(s: Snapshot) -> str:
    """The facts a reader of the screen most needs the origin of, e.g. "cache type from the server's command
    line · rate from /slots · bandwidth from the driver"."""
    parts: list[str] = []
    kv = s.provenance.get("kv_type")
    if kv == "default":
        parts.append(f"cache type assumed {s.model.kv_type_k or 'f16'} (not visible)")
    elif kv:
        parts.append(f"cache type {PROVENANCE_WORDS.get(kv, kv)}")
    if s.decode_rate_source:
        parts.append(RATE_WORDS.get(s.decode_rate_source, f"rate from {s.decode_rate_source}"))
    bw = sorted({g.bandwidth_source for g in s.gpus if g.bandwidth_source})
    if bw:
        parts.append(" + ".join(f"bandwidth from {bandwidth_source_words(b)}" for b in bw))
    return " · ".join(parts) or "no sources yet"


def sources_tip(s: Snapshot) -> str:
    """Every figure's origin, one a line, in words."""
    lines = ["Where the numbers come from:"]
    for key, what in FIELD_WORDS:
        src = s.provenance.get(key)
        if src:
            lines.append(f"  {what}: {PROVENANCE_WORDS.get(src, src)}")
    if s.decode_rate_source:
        lines.append(f"  decode {RATE_WORDS.get(s.decode_rate_source, s.decode_rate_source)}")
    for g in s.gpus:
        if g.bandwidth_source:
            lines.append(f"  GPU {g.index} peak bandwidth from {bandwidth_source_words(g.bandwidth_source)}")
    return "\n".join(lines)


def clock_text(seconds: float) -> str:
    """12:04, or 1:02:04 past an hour (a replay's position and length)."""
    s = max(0, int(seconds))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def replay_text(name: str, speed: float, position_s: float, length_s: float, playing: bool) -> str:
    """'replaying FILE · 10× · 12:04 of 48:10' (with '· paused' when stopped)."""
    pause = "" if playing else " · paused"
    return f"replaying {name} · {speed:g}× · {clock_text(position_s)} of {clock_text(length_s)}{pause}"


class StatusPanel(QtWidgets.QStatusBar):
    """The connection, the poll's age and the sources (on a second row when the window is too narrow for one), and
    the recording state on the right; each label is set only when its text changes, the age at most once a second."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizeGripEnabled(False)
        self.line = FlowBox(h_gap=2 * theme.GAP)
        self.connection = DotLabel()
        self.polled = text_label()
        self.polled.setMinimumWidth(self.polled.fontMetrics().horizontalAdvance("polled 888 s ago"))  # steady row
        self.sources = text_label(colour="muted")
        for w in (self.connection, self.polled, self.sources):
            self.line.flow.addWidget(w)
        self.addWidget(self.line, 1)
        self.recording = DotLabel()
        self.addPermanentWidget(self.recording)
        self._last_poll_monotonic: float | None = None
        self.replaying: str | None = None  # the replay's status text, when this window replays a recording
        self._recording_path: str | None = None
        self._recording_failed: str | None = None  # the alert's message while the recording is stopped by a fault
        self.set_recording(None)

    def resizeEvent(self, e: QtGui.QResizeEvent) -> None:
        super().resizeEvent(e)
        self._fit()

    def _fit(self) -> None:
        """As many rows as the labels need at this width: checked on a resize and when a text changed."""
        need = self.line.heightForWidth(self.line.width()) if self.line.width() > 0 else -1
        if need > 0 and need != self.line.minimumHeight():
            self.line.setFixedHeight(need)

    def set_replay(self, text: str | None) -> None:
        """A replay's position in place of the connection and poll age (they belong to the recorded session)."""
        self.replaying = text
        if text is not None:
            self.connection.set(text, "The recording's file, playback speed, and where in it the screen is")
            self.polled.hide()
        else:
            self.polled.show()
        self._fit()

    def update_snapshot(self, s: Snapshot) -> None:
        """Render connection state and sources of one snapshot."""
        if set_text(self.sources, sources_text(s), sources_tip(s)):
            self._fit()
        failed = next((a.message for a in s.alerts if a.code == RECORDING_FAILED), None)
        if failed != self._recording_failed:
            self._recording_failed = failed
            self.set_recording(self._recording_path)
        if self.replaying is not None:
            return
        st = s.connection.status
        level = status_level(st)  # the same level the alerts panel and the tabs give this state
        url = f" · {s.url}" if s.url else ""
        colour = "ok" if level is None else level.value
        if self.connection.set(f"● {st.value.replace('_', ' ')}{url}", s.connection.reason or f"Connection: {st.value}",
                               colour):
            self._fit()
        self._last_poll_monotonic = time.monotonic()
        self.tick()

    def tick(self) -> None:
        """Refresh the 'polled N s ago' text (called by the window's timer once a poll is late)."""
        if self.replaying is not None:
            return
        if self._last_poll_monotonic is None:
            set_text(self.polled, "not polled yet")
            return
        ago = time.monotonic() - self._last_poll_monotonic
        set_text(self.polled, f"polled {ago:.0f} s ago" if ago >= JUST_NOW_S else "polled just now",
                 "Time since the last snapshot arrived from the poller thread")

    def set_recording(self, path: str | None) -> None:
        """Show whether snapshots are being recorded, and when a fault (a full disk) stopped the recording."""
        if path != self._recording_path:
            self._recording_failed = None  # a new recording (or none) starts clean
        self._recording_path = path
        if path and self._recording_failed:
            self.recording.set("● recording failed", self._recording_failed, "critical")
        elif path:
            self.recording.set("● recording", f"Recording every snapshot to {path} (File ▸ Record session… to stop)",
                               "recording")
        else:
            self.recording.set("not recording", "File ▸ Record session… (Ctrl+R), or start with --record FILE.jsonl")
