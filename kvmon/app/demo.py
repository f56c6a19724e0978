"""The demo session: the simulator in-process (real HTTP on 127.0.0.1), monitored with its simulated devices, and a
demo stepped poll by poll on a stopped clock (``kvmon once --demo S --after N``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from kvmon.app.group_monitor import GroupMonitor
from kvmon.app.monitor import Monitor
from kvmon.app.record import RecordSwitch
from kvmon.app.session import MonitorLike, Session
from kvmon.core.analysis import Analyzer, AnalyzerSettings
from kvmon.core.backend import Backend
from kvmon.core.snapshot import Snapshot
from kvmon.sources import backends
from kvmon.sources.detect import source_class

NO_SERVER_BANNER = ("Demo: no llama-server, router, llama-swap, Ollama, vLLM or LM Studio found on this machine — "
                    "showing the simulator (start kvmon with a URL)")
DEMO_SCENARIO = "seed-3090x2"
# the kinds of the simulator's multi-model servers, as the backends that read them
MULTI_KINDS = {"router": backends.ROUTER, "llama-swap": backends.LLAMA_SWAP}


def scenario_backend(scenario: Any) -> Backend:
    """The backend a simulated scenario serves as (a router's or llama-swap's kind, else its server's backend)."""
    kind = getattr(scenario, "kind", None)
    return MULTI_KINDS[kind] if kind in MULTI_KINDS else backends.by_name(scenario.backend)


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
    backend = scenario_backend(scen)
    lmstudio = backend is backends.LMSTUDIO  # its chat comes through kvmon proxy: replies carry its only stats
    agent = bool(getattr(scen, "agent", False))  # a coding agent's chat through kvmon proxy
    proxied = lmstudio or agent
    # a simulated Ollama runs its model server as a child process, as Ollama >= 0.30 does: kvmon finds it and reads
    # its /slots, as it would on a real one; LM Studio's chat comes from a client through kvmon proxy
    sim = SimServer(scen, speed=speed, faults=faults, start_at_s=start_at_s, ollama_child=True,
                    autoplay=not proxied, stepped=stepped)
    url = sim.start()
    switch = recorder if isinstance(recorder, RecordSwitch) else RecordSwitch(url)
    cleanups: list[Callable[[], None]] = [sim.stop]
    proxy_url: str | None = None
    if proxied:
        from kvmon.proxy.server import ProxyServer
        from kvmon.sim.agent_client import AgentChat
        from kvmon.sim.lmstudio_client import ScriptedChat

        proxy = ProxyServer(url, port=0, clock=sim.clock.now)  # replies timed in simulated seconds, as all else
        proxy.start()
        proxy_url = proxy.url
        chat = AgentChat(sim, proxy.url) if agent else ScriptedChat(sim, proxy.url)
        chat.start()
        cleanups = [sim.stop, proxy.stop, chat.stop]  # run last first

    def factory() -> MonitorLike:
        from kvmon.sources.nvml import NvmlSource

        # every reading is stamped with the simulator's clock, so rates, trends and alert hold times are in
        # simulated seconds at any --speed
        clock = sim.clock.now
        options: dict[str, Any] = {"timeout_s": timeout_s, "clock": clock}
        if lmstudio:
            options.update(proxy_url=proxy_url, models_dir=sim.api.models_dir)
        elif backend is backends.LLAMA_SERVER:
            options["log_path"] = sim.log_path
            if agent:
                options["proxy_url"] = proxy_url
        server: Any = source_class(backend)(url, **options)
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
    if proxied:
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
        from kvmon.sources.nvml import NvmlSource

        clock = sim.clock.now
        source = source_class(scenario_backend(scenario))(url, timeout_s=timeout_s, clock=clock)
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

