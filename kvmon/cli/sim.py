"""``kvmon sim``: run one simulated server alone (for trying kvmon or any other client) until Ctrl-C or SIGTERM.

    kvmon sim --scenario spill-4090 --speed 10 --fault restart@120 --fault hang:5@200

Scenarios: see ``kvmon.sim.catalog`` (``kvmon sim --help`` lists them); ``--fault list`` prints the fault syntax
(``kvmon.sim.faults``) and the scenarios, then exits.
"""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from kvmon.app.endings import stop_on_signals

FAULT_HELP = "inject a fault KIND[:VALUE][@T], repeatable: restart[:LOAD]@T, hang:N[@T], loading:N[@T], " \
    "auth[:KEY], garbage[:N][@T], drip[:BYTES_PER_S][@T]; T and N in simulated seconds ('--fault list' explains)"


def seconds(text: str) -> float:
    """A number of (simulated) seconds, zero or more: ``--start-at``, ``--after``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"seconds must be 0 or more (got {text})")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``kvmon sim`` (the main parser may use this to document --fault fully)."""
    p.add_argument("--scenario", default="seed-3090x2", help="which simulated machine and chat (listed below)")
    p.add_argument("--port", type=int, default=0, help="0 = a random free port")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--speed", type=float, default=1.0, help="simulated seconds per real second")
    p.add_argument("--fault", action="append", default=[], help=FAULT_HELP)
    p.add_argument("--start-at", type=seconds, default=0.0, metavar="SECONDS",
                   help="join the scenario this many simulated seconds in")


def describe() -> str:
    """The scenarios and the fault syntax, for ``--fault list``."""
    from kvmon.sim import faults
    from kvmon.sim.catalog import scenarios_help

    return "\n".join([scenarios_help().replace("scenarios:", "Scenarios:", 1), "", "Faults:", faults.__doc__ or ""])


def run(args: Any, *, ready: threading.Event | None = None, stop: threading.Event | None = None) -> int:
    """Start the simulator, print its URL, serve until Ctrl-C (or ``stop``); 0 on a clean exit, 2 on bad options."""
    from kvmon.sim.faults import FaultSyntaxError
    from kvmon.sim.model import SimSetupError
    from kvmon.sim.server import SimServer

    fault_specs = list(getattr(args, "fault", None) or [])
    if any(f.strip().lower() in ("list", "help") for f in fault_specs):
        print(describe())
        return 0
    from kvmon.sim.catalog import check
    from kvmon.sim.multi_scenarios import get_multi_scenario

    name = getattr(args, "scenario", "seed-3090x2")
    multi = get_multi_scenario(name)
    try:
        check(name)
        options: dict[str, Any] = {"speed": float(getattr(args, "speed", 1.0)), "faults": fault_specs,
                                   "host": getattr(args, "host", "127.0.0.1"), "port": int(getattr(args, "port", 0)),
                                   "start_at_s": float(getattr(args, "start_at", 0.0) or 0.0)}
        if multi is not None:  # a router or llama-swap with its models
            from kvmon.sim.multi import MultiSim

            sim: Any = MultiSim(multi, **options)
        else:  # a simulated Ollama runs its model server as a child process, found as a real one is
            sim = SimServer(name, ollama_child=True, **options)
    except (FaultSyntaxError, SimSetupError, ValueError) as e:
        print(f"kvmon sim: {e}", file=sys.stderr)
        return 2
    try:
        url = sim.start()
    except OSError as e:
        print(f"kvmon sim: cannot listen on {sim.host}:{sim.port}: {e.strerror or e}", file=sys.stderr)
        return 2
    s = sim.scenario
    from kvmon.app.demo import scenario_backend

    backend = scenario_backend(s)
    what = backend.label if getattr(s, "kind", None) else s.backend
    print(f"kvmon sim: {s.name} ({what}) at {url}  speed ×{sim.clock.speed:g}", flush=True)
    print(f"  {s.description}", flush=True)
    if sim.faults.faults:
        print("  faults: " + ", ".join(fault_specs), flush=True)
    if backend.reads_log:
        print(f"  server log (kvmon --log): {sim.log_path}", flush=True)
    print("  Ctrl-C to stop", flush=True)
    waiter = stop or threading.Event()
    with stop_on_signals(waiter.set):  # SIGTERM and SIGINT: stop serving, remove the simulator's files, exit 0
        if ready is not None:
            ready.set()
        try:
            while not waiter.wait(0.5):
                pass
        finally:
            sim.stop()
    print("kvmon sim: stopped", flush=True)
    return 0

