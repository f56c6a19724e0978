"""The simulation proper: server lifetimes, slots, the scripted chat, client requests and the counters.

All state is a function of simulated time. Requests are scheduled whole when they arrive (their token
times come from ``kvmon.sim.model``), the scripted chat is materialised lazily up to "now" whenever
someone looks, and counters move when a request ends, as llama-server's do. One lock guards it all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvmon.sim.clock import SimClock
from kvmon.sim.faults import FaultPlan
from kvmon.sim.model import LoadedModel
from kvmon.sim.requests import SimRequest
from kvmon.sim.scenarios import Scenario

BOOT_OFFSET_S = 1322.0  # the fake machine had been up this long when the simulator started

COUNTERS = ("prompt_tokens_total", "prompt_tokens_cached_total", "prompt_seconds_total", "tokens_predicted_total",
            "tokens_predicted_seconds_total")


@dataclass
class Epoch:
    """One server process: when it began loading, when it was ready, its context size and counters."""

    index: int
    t_begin: float
    load_s: float
    n_ctx: int
    model: LoadedModel | None = None
    counters: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0.0))
    n_decode_done: int = 0
    n_tokens_max: int = 0
    bucket: dict[str, float] = field(default_factory=lambda: dict.fromkeys(("pt", "ps", "gt", "gs"), 0.0))
    busy_per_decode: float = 0.0

    @property
    def t_ready(self) -> float:
        return self.t_begin + self.load_s

    @property
    def start_time_us(self) -> int:
        """What llama-server's ``Process-Start-Time-Unix`` header holds: a monotonic clock in µs."""
        return int((BOOT_OFFSET_S + self.t_begin) * 1e6)


@dataclass(frozen=True)
class Activity:
    """What the GPUs are doing at one moment (for the simulated NVML)."""

    loading_fraction: float  # 1.0 when loaded
    phase: str  # "idle" | "prefill" | "decode" | "loading"
    decode_tok_s: float | None
    model: LoadedModel


class SimEngine:
    """The simulated server's state over simulated time; thread-safe."""

    def __init__(self, scenario: Scenario, clock: SimClock, faults: FaultPlan | None = None, *,
                 autoplay: bool = True, on_load: Callable[[Epoch], None] | None = None,
                 on_request_end: Callable[[SimRequest], None] | None = None) -> None:
        self.scenario = scenario
        self.on_load = on_load
        self.on_request_end = on_request_end
        self.clock = clock
        self.faults = faults or FaultPlan()
        self.autoplay = autoplay
        self.lock = threading.RLock()
        self._rng_seed = scenario.seed
        self._next_task = 0
        self._requests: list[SimRequest] = []  # not yet folded into counters
        self._slot_last: list[list[SimRequest]] = [[] for _ in range(scenario.n_parallel)]
        # each slot's last client prompt (its epoch, and its tokens or text): the prompt cache a next request reuses
        self._slot_prompt: list[tuple[int, Sequence[int] | str] | None] = [None] * scenario.n_parallel
        self._epochs = self._plan_epochs()
        # the scripted chat
        self._conv = 0
        self._turn = 0
        self._next_ready = scenario.script.start_delay_s
        self._script_done = False

    # -- server lifetimes -----------------------------------------------------------------------------
    def _plan_epochs(self) -> list[Epoch]:
        s = self.scenario
        events: list[tuple[float, float, int | None]] = [(0.0, s.initial_load_s, s.n_ctx)]
        if s.reload is not None:
            events.append((s.reload.at_s, s.reload.load_s, s.reload.n_ctx))
        events += [(f.at_s, f.duration_s or 0.0, None) for f in self.faults.restarts()]
        events.sort(key=lambda e: e[0])
        epochs: list[Epoch] = []
        n_ctx = s.n_ctx
        for i, (t, load_s, ctx) in enumerate(events):
            n_ctx = ctx if ctx is not None else n_ctx
            epochs.append(Epoch(i, t, load_s, n_ctx))
        return epochs

    def epoch_at(self, t: float) -> Epoch:
        """The server process alive at ``t`` (its model loaded with the memory free when it began)."""
        with self.lock:
            ep = next((e for e in reversed(self._epochs) if e.t_begin <= t), self._epochs[0])
            if ep.model is None:
                ep.model = LoadedModel(self.scenario, ep.n_ctx, self.scenario.other_vram_bytes(ep.t_begin))
                if self.on_load is not None:
                    self.on_load(ep)
            return ep

    def model_at(self, t: float) -> LoadedModel:
        """The model of the server process alive at ``t`` (``epoch_at`` loads it)."""
        model = self.epoch_at(t).model
        assert model is not None
        return model

    def slot_ctx(self, t: float) -> int:
        """Context one conversation may reach on the server process alive at ``t``: its cells per slot, at most the
        scenario's ``max_model_len`` (vLLM's limit on one request, under its pool's size)."""
        per_slot = self.epoch_at(t).n_ctx // self.scenario.n_parallel
        cap = self.scenario.max_model_len
        return min(per_slot, cap) if cap else per_slot

    def _next_epoch_begin(self, t: float) -> float | None:
        return min((e.t_begin for e in self._epochs if e.t_begin > t), default=None)

    def loading(self, t: float) -> bool:
        """Whether the server answers 503 "Loading model" at ``t``."""
        return t < self.epoch_at(t).t_ready or self.faults.loading(t)

    # -- scheduling -----------------------------------------------------------------------------------
    def _slot_free_at(self, slot: int) -> float:
        return max((r.t_end for r in self._slot_last[slot]), default=0.0)

    def _new_task_id(self) -> int:
        self._next_task += 1
        return self._next_task

    def note_task(self) -> None:
        """llama-server numbers every task, /slots and /metrics queries included."""
        with self.lock:
            self._next_task += 1

    def _schedule(self, slot: int, origin: str, t_arrive: float, cache_n: int, prompt_n: int, n_predict: int,
                  params: dict[str, Any], noise: float) -> SimRequest:
        start = max(t_arrive, self._slot_free_at(slot))
        ep = self.epoch_at(start)
        start = max(start, ep.t_ready)
        ep = self.epoch_at(start)
        model = self.model_at(start)
        room = max(1, self.slot_ctx(start) - cache_n - prompt_n)
        n_gen = max(1, min(n_predict, room))
        depths = np.arange(cache_n + prompt_n, cache_n + prompt_n + n_gen, dtype=float)
        throttle = self.scenario.throttle_at(start)
        steps = model.step_s(depths, noise, throttle.mem_clock_fraction if throttle is not None else 1.0)
        prefill_s = model.prefill_s(cache_n, prompt_n)
        times = start + prefill_s + np.cumsum(steps)
        req = SimRequest(self._new_task_id(), slot, origin, ep.index, t_arrive, start, cache_n, prompt_n,
                         prefill_s, times, n_predict, dict(params))
        nxt = self._next_epoch_begin(start)
        if nxt is not None and nxt < req.t_end:
            req.truncate_at(nxt)
        self._requests.append(req)
        last = self._slot_last[slot]
        last.append(req)
        del last[:-4]
        return req

    def _noise(self, key: int) -> float:
        rng = np.random.default_rng([self._rng_seed, key])
        return float(np.clip(rng.normal(1.0, self.scenario.noise_sd), 0.8, 1.2))

    def submit(self, prompt_tokens: int, n_predict: int, params: dict[str, Any] | None = None,
               t: float | None = None, *, prompt: Sequence[int] | str | None = None,
               slot: int | None = None) -> SimRequest:
        """A client's request: on ``slot`` when given, else the first idle slot, else queued on the slot that frees
        first. ``prompt`` (its tokens, or its text): the prefix it shares with the slot's last prompt comes from the
        cache, as llama-server's ``cache_prompt`` (at least one token is read again)."""
        with self.lock:
            now = self.clock.now() if t is None else t
            self.advance(now)
            free = [self._slot_free_at(i) for i in range(self.scenario.n_parallel)]
            if slot is None or not 0 <= slot < len(free):
                slot = min(range(len(free)), key=lambda i: (max(free[i], now), i))
            prompt_tokens = max(1, min(prompt_tokens, self.slot_ctx(now) - 1))
            cache_n = 0
            if prompt is not None:
                epoch = self.epoch_at(max(now, free[slot])).index
                last = self._slot_prompt[slot]
                if last is not None and last[0] == epoch:
                    cache_n = min(prompt_tokens - 1, _shared_tokens(last[1], prompt, prompt_tokens))
                self._slot_prompt[slot] = (epoch, prompt)
            return self._schedule(slot, "client", now, cache_n, prompt_tokens - cache_n, n_predict, params or {},
                                  self._noise(10_000 + self._next_task))

    def cancel(self, req: SimRequest, t: float | None = None) -> None:
        """The client went away: the server stops the request now and its slot is free (what it read stays cached)."""
        with self.lock:
            now = self.clock.now() if t is None else t
            if now < req.t_end:
                req.truncate_at(max(now, req.t_start))

    def reload(self, t: float, n_ctx: int, load_s: float) -> Epoch:
        """The server loads its model again at ``t`` with another context size (Ollama, for a request whose
        ``num_ctx`` differs from the loaded one)."""
        with self.lock:
            ep = Epoch(len(self._epochs), t, load_s, n_ctx)
            self._epochs.append(ep)
            for reqs in self._slot_last:
                for r in reqs:
                    if r.t_end > t:
                        r.truncate_at(t)
            return ep

    @property
    def loads(self) -> int:
        """How many times the model was loaded so far (the first load included)."""
        with self.lock:
            return sum(1 for e in self._epochs if e.t_begin <= self.clock.now())

    def _play_script(self, now: float) -> None:
        sc = self.scenario.script
        while self.autoplay and not self._script_done and self._next_ready <= now:
            ready = self._next_ready
            user = sc.user_tokens(self._turn)
            gen = int(sc.generated_tokens * (0.8 + 0.4 * np.random.default_rng([self._rng_seed, self._turn]).random()))
            if self._turn < sc.n_turns and self._conv + user + gen > self.slot_ctx(ready):
                # the context is full: when a later server start brings a larger context (the user reloads
                # with a bigger -c), the chat waits for it and goes on there
                later = [e for e in self._epochs if e.t_begin > ready and e.n_ctx // self.scenario.n_parallel
                         >= self._conv + user + gen]
                if later:
                    self._next_ready = later[0].t_ready + sc.think_s
                    return
            if self._turn >= sc.n_turns or self._conv + user + gen > self.slot_ctx(ready):
                if not sc.loop:
                    self._script_done = True
                    return
                self._conv, self._turn = 0, 0
                user = sc.user_tokens(0)
            last = self._slot_last[0][-1] if self._slot_last[0] else None
            start_ep = self.epoch_at(max(ready, self._slot_free_at(0))).index
            kept = last is not None and last.origin == "script" and last.epoch == start_ep and last.aborted_at is None
            cache_n = self._conv if kept else 0
            prompt_n = self._conv + user - cache_n
            req = self._schedule(0, "script", ready, cache_n, prompt_n, gen, {"stream": True, "n_predict": gen},
                                 self._noise(self._turn))
            self._conv = cache_n + prompt_n + req.predicted_n
            self._turn += 1
            self._next_ready = req.t_end + sc.think_s

    def advance(self, now: float) -> None:
        """Bring the simulation up to ``now``: scripted turns begun, finished requests counted."""
        with self.lock:
            self._play_script(now)
            still: list[SimRequest] = []
            for r in self._requests:
                if not r.prompt_folded and r.t_prefill_end <= min(now, r.t_end):
                    # llama-server adds a prompt to its prompt counters once it is read (decoding begins)
                    r.prompt_folded = True
                    ep = self._epochs[r.epoch]
                    c, b = ep.counters, ep.bucket
                    c["prompt_tokens_total"] += r.prompt_n
                    c["prompt_tokens_cached_total"] += r.cache_n
                    c["prompt_seconds_total"] += r.prefill_s
                    b["pt"] += r.prompt_n
                    b["ps"] += r.prefill_s
                if r.t_end > now:
                    still.append(r)
                    continue
                if r.aborted_at is None:
                    ep = self._epochs[r.epoch]
                    c = ep.counters
                    c["tokens_predicted_total"] += r.predicted_n
                    c["tokens_predicted_seconds_total"] += r.predicted_s
                    ep.n_decode_done += r.prompt_batches + max(0, r.predicted_n - 1)
                    ep.n_tokens_max = max(ep.n_tokens_max, r.context_tokens(r.t_end))
                    b = ep.bucket
                    b["gt"] += r.predicted_n
                    b["gs"] += r.predicted_s
                    ep.busy_per_decode = 1.0
                    if self.on_request_end is not None:
                        self.on_request_end(r)
            self._requests = still

    # -- views ----------------------------------------------------------------------------------------
    def busy_until(self) -> float:
        """When the last request scheduled so far ends (0 before any): the server is idle from then on."""
        with self.lock:
            return max((self._slot_free_at(i) for i in range(self.scenario.n_parallel)), default=0.0)

    def slot_request(self, slot: int, now: float) -> SimRequest | None:
        """The request a slot shows at ``now``: the latest one that has started, in this server's lifetime."""
        ep = self.epoch_at(now).index
        shown = [r for r in self._slot_last[slot] if r.t_start <= now and r.epoch == ep]
        return shown[-1] if shown else None

    def live_requests(self, now: float) -> list[SimRequest]:
        ep = self.epoch_at(now).index
        return [r for r in self._requests if r.epoch == ep and r.t_arrive <= now]

    def metrics(self, now: float) -> dict[str, float]:
        """The /metrics values at ``now`` for a scrape, which resets the throughput gauges, as llama-server's does."""
        with self.lock:
            self.advance(now)
            ep = self.epoch_at(now)
            live = self.live_requests(now)
            out: dict[str, float] = dict(ep.counters)
            out["n_decode_total"] = ep.n_decode_done + sum(r.decode_calls(now) for r in live)
            out["n_tokens_max"] = max([ep.n_tokens_max] + [r.context_tokens(now) for r in live if r.t_start <= now])
            b = ep.bucket
            out["prompt_tokens_seconds"] = b["pt"] / b["ps"] if b["ps"] > 0 else 0.0
            out["predicted_tokens_seconds"] = b["gt"] / b["gs"] if b["gs"] > 0 else 0.0
            out["requests_processing"] = sum(1 for r in live if r.is_processing(now))
            out["requests_deferred"] = sum(1 for r in live if r.is_deferred(now))
            out["n_busy_slots_per_decode"] = 1.0 if out["requests_processing"] else ep.busy_per_decode
            ep.bucket = dict.fromkeys(b, 0.0)
            return out

    def activity(self, now: float) -> Activity:
        """What the GPUs do at ``now``: loading, prefill, decode (at which speed) or idle."""
        with self.lock:
            self.advance(now)
            ep = self.epoch_at(now)
            assert ep.model is not None
            if now < ep.t_ready:
                frac = (now - ep.t_begin) / ep.load_s if ep.load_s > 0 else 1.0
                return Activity(max(0.0, min(1.0, frac)), "loading", None, ep.model)
            phase, tok_s = "idle", None
            for r in self.live_requests(now):
                if r.t_start <= now < r.t_prefill_end:
                    phase = "prefill"
                elif r.t_prefill_end <= now < r.t_end and phase != "prefill":
                    phase = "decode"
                    tok_s = ep.model.decode_tok_s(r.context_tokens(now))
            return Activity(1.0, phase, tok_s, ep.model)


def _shared_tokens(old: Sequence[int] | str, new: Sequence[int] | str, new_tokens: int) -> int:
    """Tokens at the start of ``new`` that ``old`` had too (text: the shared characters at the new prompt's rate)."""
    if isinstance(old, str) != isinstance(new, str):
        return 0
    n = 0
    for a, b in zip(old, new, strict=False):  # characters of a text, or tokens
        if a != b:
            break
        n += 1
    return n * new_tokens // max(1, len(new)) if isinstance(new, str) else n
