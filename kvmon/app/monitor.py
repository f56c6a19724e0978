"""Monitor: one poll of every source (server, GPUs, host) → one analysed Snapshot.

The glue the dashboard's poller, ``once`` and the exporter share (``kvmon.app.build`` builds it). A server failure
becomes a Snapshot with that connection state; a GPU or host failure only blanks those parts, never the server
reading; a recording that cannot be written (a full disk) stops, and every later Snapshot carries the alert that
says so, while the monitoring goes on. Typed on the source interfaces of ``kvmon.sources.base``; no source module
is imported here. It also decides when the host's one-time bandwidth probe may run: only for a server on this
machine, and only in a poll that found every slot idle while no other monitor of this process lately found its
server here busy (a probe competes with decode for the memory bus it measures).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from kvmon.core.alerts import with_recording_problem
from kvmon.core.analysis import Analyzer
from kvmon.core.connection import failure_of
from kvmon.core.curve_config import CurveMemory
from kvmon.core.deadline import PollDeadline, poll_deadline
from kvmon.core.locality import server_here
from kvmon.core.readings import FailureKind, GpuSetReading, HostReading, ServerReading, SourceFailure
from kvmon.core.snapshot import Snapshot
from kvmon.core.verdict import decided
from kvmon.sources.base import BandwidthProbe, GpuSource, HostSource, ServerSource

BUSY_FORGET_S = 30.0  # a monitor's "busy here" counts this long (longer than a hidden window's poll interval)
HOST_INTERVAL_S = 5.0  # host RAM and the server's RSS change slowly: read them this often, keep the reading between


class CurveSink(CurveMemory, Protocol):
    """The atlas of measured curves as a monitor sees it (``kvmon.app.atlas.SessionCurves``): its analysis reads the
    earlier points of the configuration, and each poll's measured point is filed there."""

    def observe(self, snap: Snapshot) -> None: ...


class SnapshotSink(Protocol):
    """Where a monitor records every snapshot (``kvmon.core.recorder.Recorder``, ``kvmon.app.record.RecordSwitch``)."""

    def record(self, snap: Snapshot) -> None: ...

    def close(self) -> None: ...


def close_quietly(*parts: object) -> None:
    """Close each part that is there; closing is best effort (a broken client must not stop the others)."""
    for part in parts:
        close = getattr(part, "close", None)
        if close is None:
            continue
        try:
            close()
        except Exception:  # closing is best effort
            pass


def idle_here(server: ServerReading | SourceFailure, server_pids: Sequence[int]) -> bool:
    """Whether a poll found a server on this machine with every slot idle (nothing decoding): the only time the
    host's bandwidth probe may run, since it competes with decode for the memory bus it measures."""
    if not isinstance(server, ServerReading) or server.state not in ("ok", "idle"):
        return False
    if not server.slots or any(s.processing for s in server.slots):
        return False  # no slots read: whether it decodes is unknown, so it might
    return server_here(server.url, server_pids)


def busy_here(server: ServerReading | SourceFailure, server_pids: Sequence[int]) -> bool:
    """Whether a poll found a server on this machine that decodes, loads, or might (its slots unread)."""
    if not isinstance(server, ServerReading) or server.state == "sleeping" or not server_here(server.url, server_pids):
        return False
    return not idle_here(server, server_pids)


class _LocalActivity:
    """Which of this process's monitors lately found their server busy on this machine: with several servers in one
    window, one idle server's monitor must not run the probe while another server here decodes. A monitor that
    stopped polling (or was dropped) no longer counts after ``BUSY_FORGET_S``."""

    def __init__(self) -> None:
        self._busy: weakref.WeakKeyDictionary[object, float] = weakref.WeakKeyDictionary()  # poller -> when seen busy
        self._lock = threading.Lock()

    def note(self, poller: object, busy: bool) -> None:
        with self._lock:
            if busy:
                self._busy[poller] = time.monotonic()
            else:
                self._busy.pop(poller, None)

    def others_busy(self, poller: object) -> bool:
        now = time.monotonic()
        with self._lock:
            return any(p is not poller and 0.0 <= now - t < BUSY_FORGET_S for p, t in self._busy.items())


LOCAL_ACTIVITY = _LocalActivity()


class DevicePoller:
    """The GPU and host sources of one monitor, read once per poll for the server's processes (host at most every
    ``host_interval_s``, and again when the processes change); their failures only blank their part."""

    def __init__(self, gpu_source: GpuSource | None = None, host_source: HostSource | None = None, *,
                 clock: Callable[[], float] = time.monotonic, host_interval_s: float = HOST_INTERVAL_S) -> None:
        self.gpu_source = gpu_source
        self.host_source = host_source
        self._clock = clock
        self.host_interval_s = host_interval_s
        self._host_cache: tuple[float, tuple[int, ...], HostReading] | None = None  # (read at, pids, reading)

    def poll_gpus(self, server_pids: tuple[int, ...]) -> GpuSetReading | None:
        if self.gpu_source is None:
            return None
        try:
            return self.gpu_source.poll(server_pids)
        except Exception as exc:  # NVML lost mid-session, a driver reset: the GPU part goes blank
            return GpuSetReading(t_monotonic=self._clock(),
                                 unavailable_reason=f"GPU reading failed: {type(exc).__name__}: {exc}")

    def poll_host(self, server_pids: tuple[int, ...]) -> HostReading | None:
        if self.host_source is None:
            return None
        now = self._clock()
        cached = self._host_cache
        if cached is not None and cached[1] == server_pids and 0.0 <= now - cached[0] < self.host_interval_s:
            return self._fresh_energy(replace(cached[2], t_monotonic=now))  # the last read's values, stamped now
        self._host_cache = None
        try:
            reading = self.host_source.poll(server_pids)
        except Exception as exc:
            return HostReading(t_monotonic=self._clock(),
                               reasons={"host": f"host reading failed: {type(exc).__name__}: {exc}"})
        if isinstance(reading, HostReading):
            self._host_cache = (now, server_pids, reading)
        return reading

    def _fresh_energy(self, reading: HostReading) -> HostReading:
        """A cached host reading with the CPU's energy counter read now (energy per interval needs every poll's)."""
        read = getattr(self.host_source, "cpu_energy", None)
        if read is None or reading.cpu_energy_j is None:
            return reading
        try:
            energy, wrap, why = read()
        except Exception:  # the counter went away: the interval is not counted
            energy, wrap, why = None, None, "the CPU energy counter could not be read"
        if why:
            return replace(reading, cpu_energy_j=None, reasons={**reading.reasons, "cpu_energy_j": why})
        return replace(reading, cpu_energy_j=energy, cpu_energy_range_j=wrap)

    def probe_if_idle(self, busy: bool, idle: bool) -> bool:
        """Note whether this poll found its server busy on this machine (the other monitors' probes wait for it);
        when it found it idle, run the host source's one-time bandwidth probe if it has one and it is due, and no
        other monitor of this process lately found its server busy here. Whether it ran; the next host reading
        carries the measurement."""
        LOCAL_ACTIVITY.note(self, busy)
        probe = self.host_source
        if not idle or not isinstance(probe, BandwidthProbe) or LOCAL_ACTIVITY.others_busy(self):
            return False
        try:
            if not probe.probe_due():
                return False
            probe.measure_bandwidth()
        except Exception:  # a failed probe leaves the bandwidth unknown, with its reason
            pass
        self._host_cache = None
        return True

    def close(self) -> None:
        LOCAL_ACTIVITY.note(self, busy=False)  # a closed monitor decodes nothing
        close_quietly(self.gpu_source, self.host_source)


class Emitter:
    """What Monitor and GroupMonitor do with each poll's Snapshot: feed it to the atlas, record it and keep it; a
    recording that stopped (a full disk) is an alert on it and on every later one, while the monitoring goes on."""

    recorder: SnapshotSink | None = None
    curves: CurveSink | None = None
    recording_problem: str | None = None  # why the recorder stopped (it is not called again)
    last_snapshot: Snapshot | None = None

    def source_of(self, name: str | None) -> ServerSource | None:
        """The source that reads the model ``name`` (None: the one model a single server serves)."""
        raise NotImplementedError

    def _emit(self, snap: Snapshot) -> Snapshot:
        if self.curves is not None:
            self.curves.observe(snap)
        problem = self._record(snap)
        if problem:
            snap = decided(replace(snap, alerts=with_recording_problem(snap.alerts, problem)))
        self.last_snapshot = snap
        return snap

    def _record(self, snap: Snapshot) -> str | None:
        """Record ``snap``; why the recording stopped when it did (now or before), else None."""
        if self.recorder is None:
            return None
        if self.recording_problem is None:
            try:
                self.recorder.record(snap)
            except (OSError, ValueError) as exc:  # a full disk, a closed file: the recording's trouble only
                self.recording_problem = f"{exc.strerror or exc}" if isinstance(exc, OSError) else str(exc)
        return self.recording_problem or getattr(self.recorder, "problem", None)


class Monitor(Emitter):
    """Polls a server source (and optional GPU and host sources) and analyses the readings."""

    def __init__(self, server_source: ServerSource, gpu_source: GpuSource | None = None,
                 host_source: HostSource | None = None, analyzer: Analyzer | None = None, *,
                 recorder: SnapshotSink | None = None, server_pids: Sequence[int] = (),
                 clock: Callable[[], float] = time.monotonic, host_interval_s: float = HOST_INTERVAL_S,
                 timeout_s: float | None = None, curves: CurveSink | None = None) -> None:
        """``server_pids``: the server's processes when its source cannot find them (an in-process simulator).
        ``curves``: the atlas of measured curves, given every Snapshot (its analyzer reads it too).

        ``clock`` timestamps readings made here (failures); give the sources the same one. ``host_interval_s``:
        the host source is read at most this often (and again whenever the server's processes change).
        ``timeout_s``: the user's timeout, one deadline for every request of a poll (``kvmon.core.deadline``).
        """
        self._clock = clock
        self.timeout_s = timeout_s
        self.server_source = server_source
        self.devices = DevicePoller(gpu_source, host_source, clock=clock, host_interval_s=host_interval_s)
        self.analyzer = analyzer or Analyzer()
        self.recorder = recorder
        self.curves = curves
        self.last_reading: ServerReading | None = None
        self._server_pids: tuple[int, ...] = tuple(server_pids)
        self.probes_run = 0  # the host bandwidth probes this monitor ran (at most one per machine)

    def source_of(self, name: str | None) -> ServerSource | None:
        return self.server_source

    @property
    def backend(self) -> str:
        """The server source's backend ("llama-server", "ollama")."""
        return self.server_source.backend

    @property
    def display_url(self) -> str:
        """The server's URL without credentials."""
        return self.server_source.display_url

    def _poll_server(self, deadline: PollDeadline | None = None) -> ServerReading | SourceFailure:
        try:
            reading = self.server_source.poll()
        except Exception as exc:  # a typed failure, or a source bug: neither may stop the dashboard
            return failure_of(exc, FailureKind.UNEXPECTED_BODY, "server source failed")
        nothing = deadline.read_nothing_since() if deadline is not None else None
        if nothing is not None:  # nothing answered: no reading, whatever the source made of its failures
            return SourceFailure(FailureKind.TIMEOUT, nothing)
        self.last_reading = reading
        if reading.server_pids:
            self._server_pids = tuple(reading.server_pids)
        return reading

    def poll(self) -> Snapshot:
        """Read every source once, every request under one deadline, and return the analysed Snapshot (never
        raises for source trouble)."""
        with poll_deadline(self.timeout_s) as deadline:
            server = self._poll_server(deadline)
            # the host's one-time bandwidth probe (well under a second), only while nothing decodes
            self.probes_run += self.devices.probe_if_idle(busy_here(server, self._server_pids),
                                                          idle_here(server, self._server_pids))
            gpus = self.devices.poll_gpus(self._server_pids)
            host = self.devices.poll_host(self._server_pids)
        return self._emit(self.analyzer.update(server, gpus, host))

    def close(self) -> None:
        """Close every source (and the recorder); errors while closing are ignored."""
        close_quietly(self.server_source, self.devices, self.recorder, self.curves)

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
