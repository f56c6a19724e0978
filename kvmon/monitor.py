"""Monitor: one poll of every source (server, GPUs, host) → one analysed Snapshot.

The glue the dashboard's poller, ``once`` and the exporter share. A server failure becomes a Snapshot
with that connection state; a GPU or host failure only blanks those parts, never the server reading.
Sources are imported inside functions so that ``kvmon.core`` stays free of httpx and pynvml.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from kvmon.core.analysis import Analyzer, AnalyzerSettings
from kvmon.core.connection import failure_of
from kvmon.core.readings import (
    FailureKind,
    GpuSetReading,
    HostReading,
    ServerReading,
    SourceError,
    SourceFailure,
)
from kvmon.core.snapshot import Snapshot

DEFAULT_CANDIDATES: tuple[str, ...] = ("http://127.0.0.1:8080", "http://127.0.0.1:11434")
HOST_INTERVAL_S = 5.0  # host RAM and the server's RSS change slowly: read them this often, keep the reading between


class Monitor:
    """Polls a server source (and optional GPU and host sources) and analyses the readings."""

    def __init__(self, server_source: Any, gpu_source: Any = None, host_source: Any = None,
                 analyzer: Analyzer | None = None, *, recorder: Any = None, server_pids: Sequence[int] = (),
                 clock: Callable[[], float] = time.monotonic, host_interval_s: float = HOST_INTERVAL_S) -> None:
        """``server_pids``: the server's processes when its source cannot find them (an in-process simulator).

        ``clock`` timestamps readings made here (failures); give the sources the same one. ``host_interval_s``:
        the host source is read at most this often (and again whenever the server's processes change).
        """
        self._clock = clock
        self.server_source = server_source
        self.gpu_source = gpu_source
        self.host_source = host_source
        self.analyzer = analyzer or Analyzer()
        self.recorder = recorder
        self.last_snapshot: Snapshot | None = None
        self.last_reading: ServerReading | None = None
        self._server_pids: tuple[int, ...] = tuple(server_pids)
        self.host_interval_s = host_interval_s
        self._host_cache: tuple[float, tuple[int, ...], HostReading] | None = None  # (read at, pids, reading)

    @property
    def backend(self) -> str | None:
        """The server source's backend ("llama-server", "ollama")."""
        return getattr(self.server_source, "backend", None)

    @property
    def display_url(self) -> str | None:
        """The server's URL without credentials."""
        return getattr(self.server_source, "display_url", None)

    def _poll_server(self) -> ServerReading | SourceFailure:
        try:
            reading = self.server_source.poll()
        except Exception as exc:  # a typed failure, or a source bug: neither may stop the dashboard
            return failure_of(exc, FailureKind.UNEXPECTED_BODY, "server source failed")
        self.last_reading = reading
        if reading.server_pids:
            self._server_pids = tuple(reading.server_pids)
        return reading

    def _poll_gpus(self) -> GpuSetReading | None:
        if self.gpu_source is None:
            return None
        try:
            return self.gpu_source.poll(self._server_pids)
        except Exception as exc:  # NVML lost mid-session, a driver reset: the GPU part goes blank
            return GpuSetReading(t_monotonic=self._clock(),
                                 unavailable_reason=f"GPU reading failed: {type(exc).__name__}: {exc}")

    def _poll_host(self) -> HostReading | None:
        if self.host_source is None:
            return None
        now = self._clock()
        cached = self._host_cache
        if cached is not None and cached[1] == self._server_pids and 0.0 <= now - cached[0] < self.host_interval_s:
            return replace(cached[2], t_monotonic=now)  # the values of the last read, stamped now
        self._host_cache = None
        try:
            reading = self.host_source.poll(self._server_pids)
        except Exception as exc:
            return HostReading(t_monotonic=self._clock(),
                               reasons={"host": f"host reading failed: {type(exc).__name__}: {exc}"})
        if isinstance(reading, HostReading):
            self._host_cache = (now, self._server_pids, reading)
        return reading

    def poll(self) -> Snapshot:
        """Read every source once and return the analysed Snapshot (never raises for source trouble)."""
        server = self._poll_server()
        gpus = self._poll_gpus()
        host = self._poll_host()
        snap = self.analyzer.update(server, gpus, host)
        self.last_snapshot = snap
        if self.recorder is not None:
            self.recorder.record(snap)
        return snap

    def close(self) -> None:
        """Close every source (and the recorder); errors while closing are ignored."""
        for src in (self.server_source, self.gpu_source, self.host_source, self.recorder):
            if src is None:
                continue
            try:
                src.close()
            except Exception:  # closing is best effort
                pass

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _detect(url: str, api_key: str | None, timeout_s: float) -> str | None:
    """The backend at ``url``, or None when nothing usable answers there."""
    from kvmon.sources.detect import detect_backend

    try:
        backend = detect_backend(url, api_key, timeout_s)
    except SourceError as exc:
        if exc.failure.kind in (FailureKind.AUTH_REJECTED, FailureKind.MODEL_LOADING):
            return "llama-server"  # something is there; let the source report the state
        return None
    return backend if backend and backend != "unknown" else None


def default_gpu_source(nvml: Any = None, settings: AnalyzerSettings | None = None) -> Any:
    """NVML for the GPUs (None when the module is missing); a machine without NVIDIA says so in its reading."""
    try:
        from kvmon.sources.nvml import NvmlSource
    except ImportError:
        return None
    user = dict(settings.gpu_bandwidth_bytes_per_s) if settings else None
    return NvmlSource(nvml, user_bandwidth_bytes_per_s=user)


def default_host_source(settings: AnalyzerSettings | None = None) -> Any:
    """psutil for host RAM and the server's RSS (None when that module is not available)."""
    try:
        from kvmon.sources.host import HostSource
    except ImportError:
        return None
    return HostSource(settings.host_bandwidth_bytes_per_s if settings else None)


def open_monitor(url: str | None, *, api_key: str | None = None, timeout_s: float = 3.0,
                 log_path: str | None = None, settings: AnalyzerSettings | None = None, nvml: Any = None,
                 gpu: bool = True, host: bool = True,
                 candidates: Sequence[str] = DEFAULT_CANDIDATES) -> Monitor:
    """A Monitor on ``url``; with no URL, the first of llama-server :8080 and Ollama :11434 that answers.

    Raises SourceError (UNREACHABLE) when no URL is given and nothing answers on the candidates.
    """
    from kvmon.sources.detect import open_source

    if url is None:
        for cand in candidates:
            if _detect(cand, api_key, timeout_s) is not None:
                url = cand
                break
        else:
            ports = " or ".join(c.rsplit(":", 1)[-1] for c in candidates)
            raise SourceError(SourceFailure(
                FailureKind.UNREACHABLE,
                f"no llama-server or Ollama found on 127.0.0.1 port {ports}: give a URL, or try --demo"))
    source = open_source(url, api_key=api_key, timeout_s=timeout_s, log_path=log_path)
    analyzer = Analyzer(settings)
    return Monitor(source, default_gpu_source(nvml, settings) if gpu else None,
                   default_host_source(settings) if host else None, analyzer)
