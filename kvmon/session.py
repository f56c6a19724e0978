"""A monitoring session, without Qt: which server (or the built-in demo), its sources, analyzer and monitor, and the
recording switch every monitor of the session writes through.

The dashboard, ``kvmon once``, ``kvmon serve``, ``kvmon screenshot`` and the self-test all build their monitors
here, so each reads a server the same way: ``open_monitor`` for a URL (auto-detected when none is given),
``demo_session`` for the simulator, ``choose_session`` for the command line's choice.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kvmon.core.analysis import Analyzer, AnalyzerSettings
from kvmon.core.readings import FailureKind, SourceError, SourceFailure
from kvmon.core.redact import scrub
from kvmon.core.snapshot import Snapshot
from kvmon.group_monitor import GroupMonitor
from kvmon.monitor import Monitor
from kvmon.sources.base import GpuSource, HostSource

NO_SERVER_BANNER = ("Demo: no llama-server, router, llama-swap, Ollama, vLLM or LM Studio found on this machine — "
                    "showing the simulator (start kvmon with a URL)")
DEMO_SCENARIO = "seed-3090x2"


class MonitorLike(Protocol):
    """What a session hands its user: ``kvmon.monitor.Monitor``, or a stand-in with the same two calls."""

    def poll(self) -> Snapshot: ...

    def close(self) -> None: ...


# --------------------------------------------------------------------------------------------- sources


def detect(url: str, api_key: str | None, timeout_s: float) -> str | None:
    """The backend to open at ``url``, or None when nothing usable answers there (asked once)."""
    from kvmon.sources.detect import backend_by_port, detect_backend

    try:
        backend = detect_backend(url, api_key, timeout_s)
    except SourceError as exc:
        if exc.failure.kind in (FailureKind.AUTH_REJECTED, FailureKind.MODEL_LOADING):
            return backend_by_port(url)  # something is there; its source reports the state
        return None
    return backend if backend and backend != "unknown" else None


def find_servers(*, api_key: str | None = None, timeout_s: float = 1.0,
                 candidates: Sequence[str] | None = None) -> Any:
    """Every server on this machine (``kvmon.sources.discover.Discovery``): the process table first, then the
    backends' default ports; with ``candidates``, those URLs only, in order."""
    from kvmon.sources import discover

    if candidates is None:
        return discover.discover(api_key=api_key, timeout_s=timeout_s)
    found = []
    for cand in candidates:
        backend = detect(cand, api_key, timeout_s)
        if backend is not None:
            found.append(discover.Found(cand.rstrip("/"), backend, f"given {cand}"))
    return discover.Discovery(tuple(found), (", ".join(candidates),))


def default_gpu_source(nvml: Any = None, settings: AnalyzerSettings | None = None) -> GpuSource | None:
    """Every device source of this system (NVML, AMD and Intel sysfs, Apple); a machine with none says so."""
    from kvmon.sources.devices import default_device_sources

    user = dict(settings.gpu_bandwidth_bytes_per_s) if settings else None
    return default_device_sources(nvml, user)


def default_host_source(settings: AnalyzerSettings | None = None) -> HostSource | None:
    """psutil for host RAM and the server's RSS (None when that module is not available)."""
    try:
        from kvmon.sources.host import HostSource as PsutilHost
    except ImportError:
        return None
    return PsutilHost(settings.host_bandwidth_bytes_per_s if settings else None, auto_probe=True)


def build_monitor(source: Any, gpu_source: GpuSource | None, host_source: HostSource | None,
                  settings: AnalyzerSettings | None = None, *, recorder: Any = None,
                  clock: Callable[[], float] | None = None, server_pids: Sequence[int] = (),
                  model_pids: Callable[[str], Sequence[int]] | None = None,
                  settings_source: Callable[[], AnalyzerSettings | None] | None = None,
                  timeout_s: float | None = None) -> Monitor | GroupMonitor:
    """A Monitor for a server source, a GroupMonitor for a model-list source (router, llama-swap).
    ``settings_source``: asked before every poll for the settings the user has now. ``timeout_s``: every poll's one
    deadline."""
    from kvmon.sources.base import ModelListSource

    kw: dict[str, Any] = {"clock": clock} if clock is not None else {}
    if isinstance(source, ModelListSource):
        return GroupMonitor(source, gpu_source, host_source, settings, recorder=recorder, model_pids=model_pids,
                            settings_source=settings_source, timeout_s=timeout_s, **kw)
    analyzer = Analyzer(settings, settings_source=settings_source, **kw)
    return Monitor(source, gpu_source, host_source, analyzer, recorder=recorder, server_pids=server_pids,
                   timeout_s=timeout_s, **kw)


def open_monitor(url: str | None, *, api_key: str | None = None, timeout_s: float = 3.0,
                 log_path: str | None = None, settings: AnalyzerSettings | None = None, nvml: Any = None,
                 gpu: bool = True, host: bool = True, candidates: Sequence[str] | None = None,
                 recorder: Any = None, backend: str | None = None, devices_url: str | None = None,
                 settings_source: Callable[[], AnalyzerSettings | None] | None = None) -> Monitor | GroupMonitor:
    """A monitor on ``url``; with no URL, the first server found on this machine (``find_servers``).

    Each candidate is asked once: the backend it answered as opens its source (``backend`` skips the question).
    Raises SourceError (UNREACHABLE) when no URL is given and nothing answers. ``recorder``: where every snapshot
    is recorded. ``devices_url``: the ``kvmon serve`` on the server's machine whose GPUs and host to read (a server on
    another machine without one has no device readings, said so; this machine's are not its).
    ``settings_source``: the session's current settings, asked before every poll (see ``Session.settings``).
    """
    from kvmon.sources.detect import open_source
    from kvmon.sources.discover import nothing_found_reason

    if url is None:
        found = find_servers(api_key=api_key, timeout_s=timeout_s, candidates=candidates)
        answering = found.answering()
        if not answering:
            raise SourceError(SourceFailure(FailureKind.UNREACHABLE, nothing_found_reason(found)))
        url, backend = answering[0].url, answering[0].backend
    source = open_source(url, api_key=api_key, timeout_s=timeout_s, log_path=log_path, backend=backend)
    gpu_src, host_src = device_sources(url, devices_url, settings=settings, nvml=nvml, gpu=gpu, host=host)
    return build_monitor(source, gpu_src, host_src, settings, recorder=recorder, settings_source=settings_source,
                         timeout_s=timeout_s)


def device_sources(url: str, devices_url: str | None, *, settings: AnalyzerSettings | None = None, nvml: Any = None,
                   gpu: bool = True, host: bool = True) -> tuple[Any, Any]:
    """(GPU source, host source) for a server at ``url``: a remote ``kvmon serve``'s when ``devices_url`` is given,
    this machine's when the server runs here, else sources that say why there are no device readings."""
    from urllib.parse import urlsplit

    from kvmon.sources.http import normalize_base_url
    from kvmon.sources.procs import is_local_host

    if devices_url:
        from kvmon.sources.remote_devices import RemoteDevices

        remote = RemoteDevices(devices_url)
        return (remote if gpu else None), (remote.host_source() if host else None)
    if not is_local_host(urlsplit(normalize_base_url(url)).hostname):
        from kvmon.sources.remote_devices import NoDevices, NoHost

        return (NoDevices() if gpu else None), (NoHost() if host else None)
    return (default_gpu_source(nvml, settings) if gpu else None), (default_host_source(settings) if host else None)


# --------------------------------------------------------------------------------------------- recording


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
        """Record from the next snapshot on to ``path`` (appending); raises OSError when it cannot be opened."""
        from kvmon.core.recorder import Recorder

        rec = Recorder(path, source_url=scrub(url or self.url or "") or None)
        with self._lock:
            old, self._rec, self.path, self.problem = self._rec, rec, path, None
        _close_quietly(old)

    def stop(self) -> None:
        """Stop recording; every line written is on disk."""
        with self._lock:
            old, self._rec, self.path, self.problem = self._rec, None, None, None
        _close_quietly(old)

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
        _close_quietly(failed)

    def close(self) -> None:
        """A monitor closing (reconnect): the recording goes on with the next monitor."""


def _close_quietly(rec: Any) -> None:
    """Close a recorder whose file may be failing (a full disk fails the last flush too)."""
    if rec is not None:
        try:
            rec.close()
        except (OSError, ValueError):
            pass


# --------------------------------------------------------------------------------------------- sessions


@dataclass
class Session:
    """A monitor factory (called again on every reconnect), a banner to show, and what to stop at the end.

    Every monitor the factory makes records through ``recorder``; ``sim`` is the in-process simulator of a demo.
    """

    factory: Callable[[], MonitorLike]
    banner: str | None = None
    url: str | None = None
    cleanups: list[Callable[[], None]] = field(default_factory=list)
    sim: Any = None
    recorder: RecordSwitch = field(default_factory=RecordSwitch)
    # what the analysis reads each poll: the command line's, updated when the user changes settings (bandwidths)
    settings: AnalyzerSettings | None = None
    # a stepped demo's clients catching up with the simulated time now (the LM Studio demo's chat), before a poll
    settle: Callable[[], None] = lambda: None

    def current_settings(self) -> AnalyzerSettings | None:
        """The settings the next poll is analysed with (a monitor asks before every poll)."""
        return self.settings

    def close(self) -> None:
        """Stop the simulator and anything else started for this session, then the recording."""
        for fn in [*reversed(self.cleanups), self.recorder.stop]:
            try:
                fn()
            except Exception as exc:  # shutting down: report, do not raise
                print(f"kvmon: cleanup failed: {exc}", file=sys.stderr)
        self.cleanups.clear()


def demo_session(scenario: Any, banner: str | None, *, timeout_s: float = 3.0, speed: float = 1.0,
                 recorder: Any = None, faults: tuple[str, ...] = (), analyzer_settings: AnalyzerSettings | None = None,
                 start_at_s: float = 0.0, stepped: bool = False) -> Session:
    """Start the simulator in-process (real HTTP on 127.0.0.1) and monitor it with its simulated GPUs.

    ``scenario`` is a name from ``kvmon.sim.catalog`` or a Scenario; ``session.sim`` is the server.
    ``recorder``: a RecordSwitch (the session's) or any recorder. ``start_at_s``: join the simulated story that
    many seconds in (documentation screenshots). ``stepped``: simulated time stands still but for ``sim.step``
    (``step_demo``).
    """
    from kvmon.sim.catalog import check
    from kvmon.sim.multi_scenarios import MultiScenario, get_multi_scenario

    multi = get_multi_scenario(check(scenario)) if isinstance(scenario, str) else scenario
    if isinstance(multi, MultiScenario):
        return _multi_demo_session(multi, banner, timeout_s=timeout_s, speed=speed, recorder=recorder,
                                   faults=faults, analyzer_settings=analyzer_settings, start_at_s=start_at_s,
                                   stepped=stepped)
    from kvmon.sim.scenarios import get_scenario
    from kvmon.sim.server import SimServer

    scen = get_scenario(scenario) if isinstance(scenario, str) else scenario
    lmstudio = scen.backend == "lmstudio"
    # a simulated Ollama runs its model server as a child process, as Ollama >= 0.30 does: kvmon finds it and reads
    # its /slots, as it would on a real one; LM Studio's chat comes from a client through kvmon proxy
    sim = SimServer(scen, speed=speed, faults=faults, start_at_s=start_at_s, ollama_child=True,
                    autoplay=not lmstudio, stepped=stepped)
    url = sim.start()
    switch = recorder if isinstance(recorder, RecordSwitch) else RecordSwitch(url)
    cleanups: list[Callable[[], None]] = [sim.stop]
    proxy_url: str | None = None
    if lmstudio:
        from kvmon.proxy.server import ProxyServer
        from kvmon.sim.lmstudio_client import ScriptedChat

        proxy = ProxyServer(url, port=0, clock=sim.clock.now)  # replies timed in simulated seconds, as all else
        proxy.start()
        proxy_url = proxy.url
        chat = ScriptedChat(sim, proxy.url)
        chat.start()
        cleanups = [sim.stop, proxy.stop, chat.stop]  # run last first

    def factory() -> MonitorLike:
        from kvmon.sources.nvml import NvmlSource

        # every reading is stamped with the simulator's clock, so rates, trends and alert hold times are in
        # simulated seconds at any --speed
        clock = sim.clock.now
        if sim.scenario.backend == "ollama":
            from kvmon.sources.ollama import OllamaSource

            server: Any = OllamaSource(url, timeout_s=timeout_s, clock=clock)
        elif sim.scenario.backend == "vllm":
            from kvmon.sources.vllm import VllmSource

            server = VllmSource(url, timeout_s=timeout_s, clock=clock)
        elif lmstudio:
            from kvmon.sources.lmstudio import LmStudioSource

            server = LmStudioSource(url, timeout_s=timeout_s, clock=clock, proxy_url=proxy_url,
                                    models_dir=sim.api.models_dir)
        else:
            from kvmon.sources.llamacpp import LlamaServerSource

            server = LlamaServerSource(url, timeout_s=timeout_s, log_path=sim.log_path, clock=clock)
        # the simulated machine's devices and RAM: its GPUs through the fake NVML (none on a CPU-only machine),
        # or its unified memory on a simulated Mac; its RAM bandwidth as the probe would have measured it
        devices = sim.unified_memory_source() or NvmlSource(nvml=sim.nvml, clock=clock)
        return Monitor(server, devices, sim.host_source(),
                       Analyzer(analyzer_settings, clock=clock, settings_source=session.current_settings),
                       recorder=recorder if recorder is not None else switch, server_pids=sim.server_pids,
                       clock=clock, timeout_s=timeout_s)

    name = getattr(sim.scenario, "name", str(scenario))
    session = Session(factory, banner or f"Demo: simulated {name}", url, cleanups, sim, switch,
                      settings=analyzer_settings)
    if lmstudio:
        session.settle = chat.settle
    elif stepped and sim.child is not None:  # a simulated Ollama's model server: a real process, up in real time
        from kvmon.sim.ollama_child import wait_ready

        ready = [False]

        def child_up() -> None:
            ready[0] = ready[0] or wait_ready(sim.child, sim.child_port)

        session.settle = child_up
    return session


def _multi_demo_session(scenario: Any, banner: str | None, *, timeout_s: float, speed: float, recorder: Any,
                        faults: tuple[str, ...], analyzer_settings: AnalyzerSettings | None,
                        start_at_s: float, stepped: bool) -> Session:
    """The simulated router or llama-swap (``kvmon.sim.multi``), monitored like a real one with its shared GPUs."""
    from kvmon.sim.multi import MultiSim

    sim = MultiSim(scenario, speed=speed, faults=faults, start_at_s=start_at_s, stepped=stepped)
    url = sim.start()
    switch = recorder if isinstance(recorder, RecordSwitch) else RecordSwitch(url)

    def factory() -> MonitorLike:
        from kvmon.sources.host import HostSource as PsutilHost
        from kvmon.sources.llama_swap import LlamaSwapSource
        from kvmon.sources.nvml import NvmlSource
        from kvmon.sources.router import LlamaRouterSource

        clock = sim.clock.now
        cls: Any = LlamaRouterSource if scenario.kind == "router" else LlamaSwapSource
        source = cls(url, timeout_s=timeout_s, clock=clock)
        host = PsutilHost(scenario.host_bandwidth_bytes_per_s, clock=clock)
        return GroupMonitor(source, NvmlSource(nvml=sim.nvml, clock=clock), host, analyzer_settings,
                            recorder=recorder if recorder is not None else switch, clock=clock,
                            model_pids=sim.model_pids, settings_source=session.current_settings,
                            timeout_s=timeout_s)

    session = Session(factory, banner or f"Demo: simulated {scenario.name}", url, [sim.stop], sim, switch,
                      settings=analyzer_settings)
    return session


def step_demo(session: Session, after_s: float, step_s: float) -> Iterator[Snapshot]:
    """A demo's monitor polled at once, then every ``step_s`` simulated seconds until ``after_s`` have passed: the
    simulated clock stands still between polls and moves on by one step before each (no real waiting, and nothing a
    busy machine could shift; made with ``stepped=True`` it never ran, so every poll lands on its exact second).
    What the window shows after as long, as ``kvmon once --demo S --after N`` prints it."""
    sim = session.sim
    sim.step(0.0)
    monitor = session.factory()
    try:
        session.settle()
        yield monitor.poll()
        watched = 0.0
        while step_s > 0 and watched < after_s - 1e-9:
            sim.step(step_s)
            session.settle()
            watched += step_s
            yield monitor.poll()
    finally:
        monitor.close()


def server_session(url: str | None, *, api_key: str | None, timeout_s: float, log_path: str | None,
                   recorder: RecordSwitch | None = None, devices_url: str | None = None,
                   backend: str | None = None, settings: AnalyzerSettings | None = None) -> Session:
    """Monitor a real server at ``url`` (auto-detected when None, on every reconnect). ``backend``: what it answered
    as when it was found (the first monitor needs no question; a reconnect asks again)."""
    switch = recorder if recorder is not None else RecordSwitch(url)
    known = [backend]

    def factory() -> MonitorLike:
        first = known.pop() if known else None
        return open_monitor(url, api_key=api_key, timeout_s=timeout_s, log_path=log_path, recorder=switch,
                            devices_url=devices_url, backend=first, settings=session.settings,
                            settings_source=session.current_settings)

    session = Session(factory, None, url, recorder=switch, settings=settings)
    return session


def choose_session(args: argparse.Namespace, api_key: str | None) -> Session:
    """Demo when asked; the URL when given; else auto-detect, falling back to the demo with a banner.

    The session's ``recorder`` records to ``--record FILE`` when given (and can be switched from the menu).
    Raises OSError when that file cannot be opened.
    """
    timeout_s = float(getattr(args, "timeout", 3.0) or 3.0)
    log_path = getattr(args, "log", None)
    switch = RecordSwitch()
    settings = settings_from_args(args)
    if getattr(args, "demo", None):
        session = demo_session(args.demo, None, timeout_s=timeout_s, recorder=switch,
                               start_at_s=float(getattr(args, "start_at", 0.0) or 0.0),
                               speed=float(getattr(args, "speed", 1.0) or 1.0), analyzer_settings=settings)
    elif args.url:
        session = server_session(args.url, api_key=api_key, timeout_s=timeout_s, log_path=log_path, recorder=switch,
                                 settings=settings)
    else:
        session = _detected_session(api_key, timeout_s, log_path, switch, settings)
    switch.url = session.url
    path = getattr(args, "record", None)
    if path:
        try:
            switch.start(path)
        except OSError:
            session.close()
            raise
    return session


def _detected_session(api_key: str | None, timeout_s: float, log_path: str | None, switch: RecordSwitch,
                      settings: AnalyzerSettings | None = None) -> Session:
    """The first server that answers on this machine (its monitor is the session's first), else the demo."""
    session = Session(lambda: None, None, None, recorder=switch, settings=settings)  # its factory follows
    try:
        first = open_monitor(None, api_key=api_key, timeout_s=min(timeout_s, 1.0), log_path=log_path,
                             recorder=switch, settings=settings, settings_source=session.current_settings)
    except SourceError:
        return demo_session(DEMO_SCENARIO, NO_SERVER_BANNER, timeout_s=timeout_s, recorder=switch,
                            analyzer_settings=settings)
    pending: list[MonitorLike] = [first]
    later = server_session(first.display_url, api_key=api_key, timeout_s=timeout_s, log_path=log_path,
                           recorder=switch, settings=settings)

    def factory() -> MonitorLike:
        later.settings = session.settings  # what the user set since (the dialog changes the session's settings)
        return pending.pop() if pending else later.factory()

    session.factory, session.url = factory, first.display_url
    return session


def settings_from_args(args: argparse.Namespace) -> AnalyzerSettings | None:
    """The analysis settings the command line asks for (``--bandwidth DEVICE=GB/s``, repeatable), or None."""
    from kvmon.core.analysis.settings import with_bandwidths

    specs = list(getattr(args, "bandwidth", None) or [])
    return with_bandwidths(AnalyzerSettings(), specs) if specs else None
