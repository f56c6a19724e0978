"""Replay of a recording in the dashboard: a time slider, 1× / 10× / 60× playback on the recording's own clock,
pause, jump to start / end / next alert.

The window is fed exactly what it was fed live (``MainWindow.load`` / ``reset``), so the numbers on screen at
index ``i`` are the numbers of snapshot ``i``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from PySide6 import QtCore, QtWidgets

from kvmon.core.recorder import RecordedSnapshots, RecordingError
from kvmon.core.snapshot import Snapshot

SPEEDS = (1.0, 10.0, 60.0)
MIN_STEP_MS = 40  # at most ~25 renders a second, however fast the playback
MAX_GAP_S = 5.0  # a pause in the recording longer than this (in real seconds at the chosen speed) is shortened


class ReplayController(QtCore.QObject):
    """Owns the playhead over ``snapshots`` and drives a MainWindow to show snapshot ``index``."""

    position_changed = QtCore.Signal(int)
    playing_changed = QtCore.Signal(bool)
    speed_changed = QtCore.Signal(float)
    failed = QtCore.Signal(str)  # the recording could no longer be read (changed on disk): why

    def __init__(self, win: QtWidgets.QMainWindow, snapshots: Sequence[Snapshot]) -> None:
        super().__init__(win)
        if not snapshots:
            raise ValueError("a replay needs at least one snapshot")
        self.win = win
        # a recording's snapshots stay in its file (each read again when shown); a list given in memory is kept
        self.snapshots: Sequence[Snapshot] = snapshots if isinstance(snapshots, RecordedSnapshots) else tuple(snapshots)
        self.times: Sequence[float] = (snapshots.times if isinstance(snapshots, RecordedSnapshots)
                                       else [s.t_wall for s in self.snapshots])
        self.index = -1
        self.speed = SPEEDS[0]
        self._timer = QtCore.QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._tick)
        self._anchor: tuple[float, float] | None = None  # (real monotonic, recording time) when play started

    @property
    def playing(self) -> bool:
        """True while playback runs."""
        return self._anchor is not None

    def seek(self, index: int) -> None:
        """Show snapshot ``index``: forward by loading the snapshots in between, backward by rebuilding."""
        index = max(0, min(int(index), len(self.snapshots) - 1))
        if index == self.index:
            return
        try:
            if index < self.index or self.index < 0:
                self.win.reset()  # type: ignore[attr-defined]
                self.win.load(self.snapshots[: index + 1])  # type: ignore[attr-defined]
            else:
                self.win.load(self.snapshots[self.index + 1: index + 1])  # type: ignore[attr-defined]
        except RecordingError as exc:  # the file changed under the replay: stop where it still read
            self.pause()
            self.failed.emit(str(exc))
            return
        self.index = index
        if self._anchor is not None:
            self._anchor = (time.monotonic(), self.times[index])
        self.position_changed.emit(index)

    def set_speed(self, speed: float) -> None:
        """1×, 10× or 60× (any positive factor works); playing continues from here at the new speed."""
        if speed <= 0:
            raise ValueError(f"speed must be > 0 (got {speed!r})")
        self.speed = float(speed)
        if self.playing:
            self._anchor = (time.monotonic(), self.times[self.index])
            self._schedule()
        self.speed_changed.emit(self.speed)

    def play(self) -> None:
        """Start (or continue) playback; from the start when at the end."""
        if self.index >= len(self.snapshots) - 1:
            self.seek(0)
        self._anchor = (time.monotonic(), self.times[max(self.index, 0)])
        self.playing_changed.emit(True)
        self._schedule()

    def pause(self) -> None:
        """Stop playback at the current snapshot."""
        self._timer.stop()
        if self._anchor is not None:
            self._anchor = None
            self.playing_changed.emit(False)

    def toggle(self) -> None:
        """Play or pause."""
        self.pause() if self.playing else self.play()

    def next_alert(self) -> None:
        """Jump to the next snapshot whose alerts differ from the current one's (a new warning, or one cleared)."""
        cur = self._codes(self.index)
        for i in range(self.index + 1, len(self.snapshots)):
            if self._codes(i) != cur:
                self.seek(i)
                return
        self.seek(len(self.snapshots) - 1)

    def _codes(self, i: int) -> frozenset[str]:
        if i < 0:
            return frozenset()
        if isinstance(self.snapshots, RecordedSnapshots):
            return self.snapshots.alert_codes(i)
        return frozenset(a.code for a in self.snapshots[i].alerts)

    def _target_index(self) -> int:
        assert self._anchor is not None
        real0, rec0 = self._anchor
        t = rec0 + (time.monotonic() - real0) * self.speed
        i = self.index
        while i + 1 < len(self.snapshots) and self.times[i + 1] <= t:
            i += 1
        return i

    def _schedule(self) -> None:
        if self._anchor is None:
            return
        if self.index >= len(self.snapshots) - 1:
            self.pause()
            return
        real0, rec0 = self._anchor
        due_real = real0 + (self.times[self.index + 1] - rec0) / self.speed
        wait_s = due_real - time.monotonic()
        if wait_s > MAX_GAP_S:  # a long pause in the recording: shorten it, keep going
            self._anchor = (time.monotonic() + MAX_GAP_S, self.times[self.index + 1])
            wait_s = MAX_GAP_S
        self._timer.start(max(MIN_STEP_MS, int(wait_s * 1000)))

    def _tick(self) -> None:
        if self._anchor is None:
            return
        target = max(self._target_index(), self.index + 1)
        anchor = self._anchor
        self.seek(target)
        self._anchor = anchor  # keep the playback clock (seek re-anchors for user jumps only)
        self._schedule()


class JumpStyle(QtWidgets.QProxyStyle):
    """The application's style, except that a click on a slider's groove jumps there (not a page step on)."""

    def styleHint(self, hint: QtWidgets.QStyle.StyleHint, opt: QtWidgets.QStyleOption | None = None,
                  widget: QtWidgets.QWidget | None = None, ret: QtWidgets.QStyleHintReturn | None = None) -> int:
        if hint == QtWidgets.QStyle.StyleHint.SH_Slider_AbsoluteSetButtons:
            return QtCore.Qt.MouseButton.LeftButton.value
        return super().styleHint(hint, opt, widget, ret)


class ReplayBar(QtWidgets.QWidget):
    """Slider, play/pause, speed, jumps and the recording time of the current snapshot."""

    def __init__(self, ctl: ReplayController, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctl = ctl
        lay = QtWidgets.QHBoxLayout(self)
        lay.setContentsMargins(4, 0, 4, 0)
        style = self.style()
        sp = QtWidgets.QStyle.StandardPixmap

        def button(text: str, icon: QtWidgets.QStyle.StandardPixmap | None, tip: str) -> QtWidgets.QToolButton:
            b = QtWidgets.QToolButton()
            b.setText(text)
            b.setToolTip(tip)
            if icon is not None:
                b.setIcon(style.standardIcon(icon))
            return b

        self._icons = (style.standardIcon(sp.SP_MediaPlay), style.standardIcon(sp.SP_MediaPause))
        self.start_btn = button("Start", sp.SP_MediaSkipBackward, "Jump to the start (Home)")
        self.play_btn = button("Play", sp.SP_MediaPlay, "Play / pause (P)")
        self.alert_btn = button("Next alert", None, "Jump to the next change in alerts (N)")
        self.end_btn = button("End", sp.SP_MediaSkipForward, "Jump to the end (End)")
        self.speed_box = QtWidgets.QComboBox()
        self.speed_box.setToolTip("Playback speed, on the recording's own clock")
        for speed in SPEEDS:
            self.speed_box.addItem(f"{speed:g}×", speed)
        self.slider = QtWidgets.QSlider(QtCore.Qt.Orientation.Horizontal)
        self.slider.setRange(0, len(ctl.snapshots) - 1)
        self.slider.setToolTip("Time in the recording: click or drag to jump")
        self._style = JumpStyle()  # on the application's style, which it does not own
        self._style.setParent(self.slider)
        self.slider.setStyle(self._style)
        self.label = QtWidgets.QLabel()
        self.label.setMinimumWidth(220)
        for w in (self.start_btn, self.play_btn, self.alert_btn, self.end_btn, self.speed_box):
            lay.addWidget(w)
        lay.addWidget(self.slider, 1)
        lay.addWidget(self.label)
        self.start_btn.clicked.connect(lambda: ctl.seek(0))
        self.end_btn.clicked.connect(lambda: ctl.seek(len(ctl.snapshots) - 1))
        self.play_btn.clicked.connect(ctl.toggle)
        self.alert_btn.clicked.connect(ctl.next_alert)
        self.speed_box.currentIndexChanged.connect(lambda i: ctl.set_speed(float(self.speed_box.itemData(i))))
        self.slider.valueChanged.connect(ctl.seek)
        ctl.position_changed.connect(self._moved)
        ctl.playing_changed.connect(self._playing)

    def _playing(self, on: bool) -> None:
        self.play_btn.setText("Pause" if on else "Play")
        self.play_btn.setIcon(self._icons[1 if on else 0])

    def _moved(self, i: int) -> None:
        with QtCore.QSignalBlocker(self.slider):
            self.slider.setValue(i)
        t_wall = self.ctl.times[i]
        elapsed = t_wall - self.ctl.times[0]
        stamp = time.strftime("%H:%M:%S", time.localtime(t_wall))
        self.label.setText(f"{i + 1} / {len(self.ctl.snapshots)} · {stamp} · +{elapsed / 60:.1f} min")


def status_text(ctl: ReplayController, name: str) -> str:
    """The status bar's words for where the replay is: 'replaying FILE · 10× · 12:04 of 48:10'."""
    from kvmon.gui.panels.status import replay_text

    i = max(ctl.index, 0)
    return replay_text(name, ctl.speed, ctl.times[i] - ctl.times[0], ctl.times[-1] - ctl.times[0], ctl.playing)


def attach(win: QtWidgets.QMainWindow, snapshots: Sequence[Snapshot], name: str = "recording", *,
           loaded: bool = False) -> ReplayController:
    """Add the replay bar as a bottom toolbar of ``win`` with its shortcuts, and show the last snapshot; the status
    bar says which file (``name``), at what speed and where in it. ``loaded``: the window already holds every
    snapshot (it was filled while the file was read)."""
    from PySide6 import QtGui

    ctl = ReplayController(win, snapshots)

    def say(*_args: object) -> None:
        win.set_replay_status(status_text(ctl, name))  # type: ignore[attr-defined]

    ctl.position_changed.connect(say)
    ctl.playing_changed.connect(say)
    ctl.speed_changed.connect(say)
    ctl.failed.connect(lambda why: win.set_replay_status(f"replay stopped: {why}"))  # type: ignore[attr-defined]
    bar = ReplayBar(ctl)
    tb = QtWidgets.QToolBar("Replay", win)
    tb.setObjectName("replay")
    tb.setMovable(False)
    tb.addWidget(bar)
    win.addToolBar(QtCore.Qt.ToolBarArea.BottomToolBarArea, tb)
    keys = (("P", "play / pause", ctl.toggle), ("Home", "jump to the start", lambda: ctl.seek(0)),
            ("End", "jump to the end", lambda: ctl.seek(len(ctl.snapshots) - 1)),
            ("N", "next change in alerts", ctl.next_alert),
            ("Right", "one snapshot on", lambda: ctl.seek(ctl.index + 1)),
            ("Left", "one snapshot back", lambda: ctl.seek(ctl.index - 1)))
    win.extra_shortcuts = [(key, f"Replay: {words}") for key, words, _fn in keys]  # type: ignore[attr-defined]
    for key, _words, fn in keys:
        QtGui.QShortcut(QtGui.QKeySequence(key), win).activated.connect(fn)
    ctl.bar = bar  # type: ignore[attr-defined]
    if loaded:
        ctl.index = len(snapshots) - 1
        ctl.position_changed.emit(ctl.index)
    else:
        ctl.seek(len(snapshots) - 1)  # open on the whole session, as recorded; Home goes back to the start
    return ctl
