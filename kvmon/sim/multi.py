"""MultiSim: a simulated server that starts one model server per model on demand — llama-server's router mode or
llama-swap — over real HTTP, with the GPUs all its model servers share.

Each model server is a ``SimServer`` on its own port, living in the front's simulated time from its start
(``kvmon.sim.clock.OffsetClock``), with its own fake process id on the GPUs. The front's API (``router_api``,
``swap_api``) answers as the real one does; this module keeps the model servers' lives: loading (with progress),
ready, asleep when idle (router), stopped after a ttl (llama-swap), failed, unloaded. Every change of status is
kept as an event, for ``/models/sse`` and for tests. Tests also read what a monitor must never cause: a model
loaded by a GET (``autoloads``), a sleeping model woken (``wakes``), a model started through ``/upstream/``
(``upstream_starts``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from kvmon.sim import permit
from kvmon.sim.clock import OffsetClock, SimClock
from kvmon.sim.faults import FaultPlan, parse_faults
from kvmon.sim.gpu import SimGpus
from kvmon.sim.multi_scenarios import LLAMA_SWAP, ROUTER, MultiScenario, ServedSpec
from kvmon.sim.reply import Reply
from kvmon.sim.router_api import RouterApi
from kvmon.sim.server import LLAMA_SERVER, SimBackend, SimServer, _Handler, _HttpServer, has_key
from kvmon.sim.swap_api import SwapApi

CHILD_PID_BASE = 4_100_000  # fake process ids of the model servers on the simulated GPUs
UNLOAD_S = 0.5  # a stopping model server takes this long to exit
TICK_S = 0.1  # real seconds between two looks at the plan, the sleep timers and the GPUs
JOIN_STEP_S = 0.5  # simulated seconds between two looks when time is moved on at once (joining later, a step)
# the front's HTTP: a router is a llama-server (its headers; its API answers its own refusals), llama-swap its own
ROUTER_FRONT = replace(LLAMA_SERVER, api=RouterApi)
SWAP_FRONT = SimBackend(SwapApi)


@dataclass
class Child:
    """One model server process: when it started (front time), its server, and how it ended."""

    spec: ServedSpec
    pid: int
    started_at: float
    server: SimServer
    ended_at: float | None = None
    exit_code: int | None = None
    last_task_at: float = 0.0  # the last request that keeps it awake (front time)
    asleep: bool = False
    port: int = 0
    stopped: bool = False  # its server was stopped (the process exited)

    @property
    def ready_at(self) -> float:
        return self.started_at + self.spec.load_s

    def status(self, now: float) -> str:
        """unloaded | failed | unloading | loading | loaded | sleeping (as the router calls them)."""
        if self.ended_at is not None and now >= self.ended_at:
            return "failed" if self.exit_code else "unloaded"
        if self.ended_at is not None and not self.exit_code:
            return "unloading"
        if now < self.ready_at:
            return "loading"
        return "sleeping" if self.asleep else "loaded"

    def progress(self, now: float) -> float:
        return max(0.0, min(1.0, (now - self.started_at) / self.spec.load_s)) if self.spec.load_s > 0 else 1.0

    def idle_since(self) -> float:
        eng = self.server.engine
        eng.advance(self.server.clock.now())
        return max(self.ready_at, self.last_task_at, self.started_at + eng.busy_until())


@dataclass
class StatusEvent:
    t: float
    model: str
    event: str  # "model_status" (spawned) | "status_change"
    data: dict[str, Any] = field(default_factory=dict)


class MultiSim:
    """A simulated router or llama-swap on 127.0.0.1 (random free port by default)."""

    def __init__(self, scenario: MultiScenario, *, speed: float = 1.0, host: str = "127.0.0.1", port: int = 0,
                 start_at_s: float = 0.0, faults: Iterable[str] = (), stepped: bool = False) -> None:
        """``stepped``: simulated time never runs by itself, only ``step`` moves it (from ``start_at_s``)."""
        permit.allow("the simulator")  # its simulated GPUs are what the demo shows
        self.scenario = scenario
        self.stepped = stepped
        self.clock = SimClock(speed, running=False)
        self.faults = FaultPlan(parse_faults(list(faults)))
        self.stopping = threading.Event()
        self.lock = threading.RLock()
        self.gpus = SimGpus(scenario.models[0].scenario)
        self.children: dict[str, Child] = {}  # the latest process of each model
        self.events: list[StatusEvent] = []
        self.autoloads: list[str] = []  # models a GET loaded (the trap a monitor must avoid)
        self.wakes: list[str] = []  # sleeping models a request woke
        self.upstream_starts: list[str] = []  # llama-swap: models a /upstream/ request started
        self.host, self.port = host, port
        self._plan = sorted(scenario.plan)
        self._plan_done = 0
        self._next_pid = CHILD_PID_BASE
        self._httpd: _HttpServer | None = None
        self._threads: list[threading.Thread] = []
        self._last_status: dict[str, str] = {}
        self._start_at_s = start_at_s
        self.served_as = ROUTER_FRONT if scenario.kind == ROUTER else SWAP_FRONT
        self.api: Any = self.served_as.api(self)

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> str:
        """Bind and serve; the plan runs from simulated time 0 (or ``start_at_s``)."""
        if self._httpd is not None:
            return self.url
        httpd = _HttpServer((self.host, self.port), _Handler)
        httpd.sim = self
        self._httpd = httpd
        self.port = int(httpd.server_address[1])
        if not self.stepped:
            self.clock.start()
        self._run_to(self._start_at_s)  # join the story later: the plan and timers run up to then
        self._threads = [threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                          name="kvmon-multisim-http", daemon=True),
                         threading.Thread(target=self._tick_loop, name="kvmon-multisim-tick", daemon=True)]
        for t in self._threads:
            t.start()
        return self.url

    def stop(self) -> None:
        self.stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        for t in self._threads:
            t.join(timeout=2)
        self._httpd = None
        with self.lock:
            for c in self.children.values():
                c.server.stop()

    def __enter__(self) -> MultiSim:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def nvml(self) -> Any:
        return self.gpus.nvml

    def model_pids(self, name: str) -> tuple[int, ...]:
        """The fake process id the GPUs show for a model's server (for the monitor's GPU split)."""
        c = self.children.get(name)
        return (c.pid,) if c is not None and c.status(self.clock.now()) not in ("unloaded", "failed") else ()

    # -- model servers --------------------------------------------------------------------------------
    def status(self, name: str, now: float | None = None) -> str:
        c = self.children.get(name)
        return c.status(self.clock.now() if now is None else now) if c is not None else "unloaded"

    def running(self, name: str, now: float | None = None) -> bool:
        return self.status(name, now) in ("loading", "loaded", "sleeping")

    def spawn(self, name: str, now: float) -> Child:
        """Start a model's server (it loads for ``load_s``); the caller checked that it is not running."""
        spec = self.scenario.spec(name)
        assert spec is not None
        with self.lock:
            self._next_pid += 1
            old = self.children.get(name)
            if old is not None and not old.stopped:
                old.server.stop()
                old.stopped = True
            sc = replace(spec.scenario, initial_load_s=spec.load_s)
            server = SimServer(sc, clock=OffsetClock(self.clock, now), server_pid=self._next_pid, gpu_refresh_s=0)
            server.start()
            child = Child(spec, self._next_pid, now, server, last_task_at=now, port=server.port)
            if spec.fail_after_s is not None:
                child.ended_at, child.exit_code = now + spec.fail_after_s, 1
            self.children[name] = child
            self.events.append(StatusEvent(now, name, "model_status", {"status": "loading"}))
            self._evict(name, now)
            return child

    def unload(self, name: str, now: float) -> bool:
        with self.lock:
            if not self.running(name, now):
                return False
            c = self.children[name]
            c.ended_at, c.exit_code = now + UNLOAD_S, 0
            return True

    def _evict(self, keep: str, now: float) -> None:
        """llama-swap swaps (one model at a time); a router unloads the least recently used beyond --models-max."""
        running = [c for n, c in self.children.items() if n != keep and self.running(n, now)]
        limit = 0 if self.scenario.kind == LLAMA_SWAP else max(0, self.scenario.models_max - 1)
        for c in sorted(running, key=lambda c: c.last_task_at)[:max(0, len(running) - limit)]:
            self.unload(c.spec.name, now)

    def touch(self, name: str, now: float) -> None:
        """A request for the model (keeps it awake; wakes it if asleep)."""
        c = self.children.get(name)
        if c is None:
            return
        c.last_task_at = now
        if c.asleep:
            c.asleep = False
            c.server.sleeping = False
            self.wakes.append(name)

    def spawn_and_wait(self, name: str, now: float) -> bool:
        """Start a model's server and wait until it is ready; False when it failed (or the simulator stops) first."""
        child = self.spawn(name, now)
        end = child.ended_at if child.ended_at is not None else child.ready_at
        return self.clock.sleep_until(end, self.stopping) and child.ended_at is None

    def args(self, name: str, port: int | None = None) -> list[str]:
        """The model server's command line as llama-server's router renders it (long flags, argv[0] first)."""
        spec = self.scenario.spec(name)
        assert spec is not None
        sc = spec.scenario
        c = self.children.get(name)
        model_path = c.server.model_path if c is not None else f"/models/{name}.gguf"
        out = ["/usr/local/bin/llama-server", "--host", "127.0.0.1", "--metrics", "--port",
               str(port if port is not None else (c.port if c is not None else 0)), "--alias", name,
               "--ctx-size", str(sc.n_ctx), "--model", model_path, "--parallel", str(sc.n_parallel),
               "--cache-type-k", sc.type_k, "--cache-type-v", sc.type_v, "--flash-attn", sc.flash_attn]
        if self.scenario.sleep_idle_s is not None:
            out += ["--sleep-idle-seconds", f"{self.scenario.sleep_idle_s:g}"]
        return out

    # -- time -----------------------------------------------------------------------------------------
    def step(self, seconds: float) -> None:
        """Stop simulated time running by itself and move it on ``seconds``, the plan and the timers run on the way
        (half a second at a time, as when joining the story later)."""
        self.clock.pause()
        self._run_to(self.clock.now() + seconds)

    def _run_to(self, end: float) -> None:
        """Move simulated time on to ``end`` half a second at a time, the plan and the timers running on the way."""
        while self.clock.now() < end:
            self.clock.advance(min(JOIN_STEP_S, end - self.clock.now()))
            self.tick()

    def _tick_loop(self) -> None:
        while not self.stopping.wait(TICK_S):
            try:
                self.tick()
            except Exception:  # a bug in one tick must not stop the simulation; the next one retries
                pass

    def tick(self) -> None:
        """Run the plan up to now; put idle models to sleep, stop idle ones (ttl); note status changes."""
        now = self.clock.now()
        with self.lock:
            while self._plan_done < len(self._plan) and self._plan[self._plan_done][0] <= now:
                t, action, name = self._plan[self._plan_done]
                self._plan_done += 1
                if action == "load" and not self.running(name, t):
                    self.spawn(name, t)
                elif action == "unload":
                    self.unload(name, t)
            for name, c in self.children.items():
                st = c.status(now)
                if st in ("unloaded", "failed") and not c.stopped:
                    c.server.stop()
                    c.stopped = True
                if st == "loaded" and self.scenario.sleep_idle_s is not None and \
                        now - c.idle_since() >= self.scenario.sleep_idle_s:
                    c.asleep, c.server.sleeping = True, True
                elif st == "loaded" and self.scenario.ttl_s is not None and now - c.idle_since() >= self.scenario.ttl_s:
                    self.unload(name, now)
                self._note(name, c, now)
            acts = [(c.pid, c.server.engine.activity(c.server.clock.now())) for c in self.children.values()
                    if c.status(now) in ("loading", "loaded", "unloading")]
            self.gpus.refresh(acts, 0, now)

    def _note(self, name: str, c: Child, now: float) -> None:
        st = c.status(now)
        shown = "unloaded" if st == "failed" else st
        data: dict[str, Any] = {"status": shown}
        if st == "loading":
            data["progress"] = {"stages": ["text_model"], "current": "text_model", "value": round(c.progress(now), 3)}
        elif shown == "unloaded":
            data["exit_code"] = c.exit_code or 0
        key = f"{shown}:{data.get('progress', {}).get('value', '')}"
        if self._last_status.get(name) != key and st != "unloading":
            self._last_status[name] = key
            self.events.append(StatusEvent(now, name, "status_change", data))

    # -- requests -------------------------------------------------------------------------------------
    def answer(self, method: str, path: str, query: dict[str, str], headers: dict[str, str],
               raw: bytes) -> Reply | None:
        """Faults first (a hung or key-protected front), then the front's API."""
        now = self.clock.now()
        hang_end = self.faults.hang_until(now)
        if hang_end is not None and not self.clock.sleep_until(hang_end, self.stopping):
            return None
        self.tick()
        key = self.faults.api_key(now)
        if key is not None and path not in self.api.public_paths and not has_key(headers, key):
            return self.api.unauthorized(headers)
        return self.api.handle(method, path, query, headers, raw)
