"""The recording switch every monitor of a session writes through, switched on and off from the menu."""

from __future__ import annotations

import os
import threading
from typing import Any

from kvmon.app.monitor import close_quietly  # a failing file fails its last flush too
from kvmon.core.redact import scrub
from kvmon.core.snapshot import Snapshot


class RecordSwitch:
    """The session's recorder, switched on and off (from the menu) while the poll thread writes through it.

    Monitors call ``record`` and, on reconnect, ``close``: that does not end the recording (the next monitor
    keeps writing to the same file); ``stop`` does. A write that fails (a full disk) stops the recording and
    leaves the reason in ``problem`` until the next ``start`` or ``stop``; ``record`` itself never raises.
    """

    def __init__(self, url: str | None = None) -> None:
        self._lock = threading.Lock()
        self._rec: Any = None
        self.url = url
        self.path: str | None = None
        self.problem: str | None = None

    def start(self, path: str, url: str | None = None) -> None:
        """Record from the next snapshot on to ``path`` (appending to a kvmon recording); raises OSError when it
        cannot be opened or written, or is no file to record to (``kvmon.core.recorder.RecordingRefused``)."""
        from kvmon.core.recorder import Recorder

        rec = Recorder(path, source_url=scrub(url or self.url or "") or None)
        with self._lock:
            old, self._rec, self.path, self.problem = self._rec, rec, path, None
        close_quietly(old)

    def try_start(self, path: str, url: str | None = None) -> str | None:
        """``start``, but a recording that cannot start is no reason to stop monitoring: it becomes this switch's
        ``problem`` (every snapshot then carries the alert that says so), returned in the user's words."""
        try:
            self.start(path, url)
        except OSError as exc:
            why = exc.strerror if exc.strerror else str(exc)
            with self._lock:
                old, self._rec, self.path = self._rec, None, None
                self.problem = f"cannot record to {os.path.basename(path) or path} ({why})"
            close_quietly(old)
            return self.problem
        return None

    def stop(self) -> None:
        """Stop recording; every line written is on disk."""
        with self._lock:
            old, self._rec, self.path, self.problem = self._rec, None, None, None
        close_quietly(old)

    def record(self, snap: Snapshot) -> None:
        """Write one snapshot when recording (called from the poll thread); a failed write stops the recording."""
        with self._lock:
            if self._rec is None:
                return
            try:
                self._rec.record(snap)
            except (OSError, ValueError) as exc:
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                name = os.path.basename(self.path or "") or "the recording"
                self.problem = f"cannot write to {name} ({why})"
                failed, self._rec = self._rec, None
            else:
                return
        close_quietly(failed)

    def close(self) -> None:
        """A monitor closing (reconnect): the recording goes on with the next monitor."""
