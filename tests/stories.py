"""What a user must see in each built-in scenario, at points of its story: plain data, in the user's words.

A scenario (``kvmon.sim.scenarios``, ``kvmon.sim.multi_scenarios``) says what is simulated; its story here says what
the dashboard must show while it plays: the headline (decoding, idle, loading; spilled when part of the model or its
cache lives in host RAM), a ceiling with the efficiency at most 100 %, the memory bars of each device (weights, KV
cache, other programs, free; host RAM when the model lives there too), the alert the scenario exists for (raised
within its hold time of its cause, cleared when the cause goes) and the forecast (finite, under the ceiling, and
within a band of what the simulator really does later at that depth: its later speeds are the truth).

A story is watched in stretches (``Watch``): joined ``start_at_s`` into the scenario and polled every ``step_s``
simulated seconds up to ``until_s``, the way ``kvmon once --demo S --start-at T --after N`` and ``kvmon screenshot
--demo S --start-at T`` join it. Every scenario has a story (the tests check each one, in the window and in
``once --json``); a scenario without one fails them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvmon.sim.catalog import key_moments

DECODING = "decoding"  # a speed in tok/s in the header
IDLE = "idle"  # the server is up, nothing decodes
LOADING = "loading"  # the model (re)loads: the dashboard says so
STATES = (DECODING, IDLE, LOADING)
LEVELS = ("ok", "info", "warning", "critical")  # the headline's (kvmon.core.snapshot.VerdictLevel)

GiB = tuple[float, float]  # an inclusive range in GiB


@dataclass(frozen=True)
class Bar:
    """One device's memory bar: ``device`` is its label on screen ("GPU 0", "Unified", "Host"); each part is a
    range in GiB (None: not checked; (0, 0): none of it there)."""

    device: str
    weights: GiB | None = None
    kv: GiB | None = None  # the KV cache allocated there
    other: GiB | None = None  # other programs' memory
    free: GiB | None = None
    compute: GiB | None = None  # the server's compute buffers and what kvmon cannot attribute


@dataclass(frozen=True)
class Forecast:
    """The forecast at these context depths (forecast milestones, deeper than the story is when it is read): finite,
    at or under the ceiling there, and within ``within`` (a fraction) of the speed the simulator really decodes at
    that depth later in the story."""

    depths: tuple[int, ...]
    within: float | None = 0.15  # None: the story does not reach that depth later (finite and under the ceiling only)


@dataclass(frozen=True)
class Moment:
    """What the user sees at one point of the story: the first poll at or after ``at_s`` (simulated seconds) whose
    headline is ``state``, looked for up to ``within_s`` later; every other field is checked at that poll.

    ``ceiling``: a ceiling in the header and the efficiency at most 100 % (``ceiling_tok_s``: within this range).
    ``depth``: the context depth shown. ``bars``: exactly these memory bars, each within its ranges. ``spilled``: part
    of the model or its cache in host RAM, read by decode (the header's devices say "+ CPU", host RAM holds it).
    ``alerts``: these alert codes shown. ``model``: the model the header names (a router: the one chatted with).
    ``models``: a router's or llama-swap's models and the status each one's chip says ("loading", "sleeping").
    ``level``: at a key moment of the scenario (``_key``): the headline's level and colour there, and ``says``, words
    its sentence holds."""

    name: str  # what is seen, in a few words (the test's id)
    at_s: float
    state: str | None = None
    within_s: float = 0.0
    ceiling: bool | None = None
    ceiling_tok_s: tuple[float, float] | None = None
    depth: bool | None = None
    bars: tuple[Bar, ...] | None = None
    spilled: bool | None = None
    alerts: tuple[str, ...] = ()
    forecast: Forecast | None = None
    model: str | None = None
    models: tuple[tuple[str, str], ...] = ()
    level: str | None = None
    says: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.state is not None and self.state not in STATES:
            raise ValueError(f"moment {self.name!r}: state {self.state!r} is not one of {', '.join(STATES)}")
        if self.level is not None and self.level not in LEVELS:
            raise ValueError(f"moment {self.name!r}: level {self.level!r} is not one of {', '.join(LEVELS)}")


@dataclass(frozen=True)
class Alert:
    """The alert a scenario exists for: ``code`` at ``level`` ("info" | "warning" | "critical"), never before
    ``not_before_s`` (its cause is not there yet), shown by ``by_s`` (or by the first poll at ``by_depth`` tokens of
    context): early enough to act on; when the cause goes (``gone_s``) it is gone by ``gone_s + clear_within_s`` and
    stays gone to the end of the watch."""

    name: str
    code: str
    level: str
    not_before_s: float
    by_s: float | None = None
    by_depth: int | None = None
    gone_s: float | None = None
    clear_within_s: float = 30.0

    def __post_init__(self) -> None:
        if (self.by_s is None) == (self.by_depth is None):
            raise ValueError(f"alert {self.name!r}: give by_s or by_depth, one of them")


@dataclass(frozen=True)
class Watch:
    """One stretch of the story: joined ``start_at_s`` in, polled every ``step_s`` simulated seconds to ``until_s``.
    Any warning or critical alert shown in it that is not one of its ``alerts`` (nor named in ``allowed``) is a
    false alarm."""

    start_at_s: float
    until_s: float
    step_s: float = 1.0
    moments: tuple[Moment, ...] = ()
    alerts: tuple[Alert, ...] = ()
    allowed: tuple[str, ...] = ()

    def codes(self) -> set[str]:
        """The warning-or-worse alerts this stretch may show."""
        return {a.code for a in self.alerts} | set(self.allowed)


@dataclass(frozen=True)
class Story:
    """A scenario's story: the stretches it is watched in."""

    scenario: str
    watches: tuple[Watch, ...]


def _key(scenario: str, name: str, **checks: Any) -> Moment:
    """A key moment of the scenario (``--help`` lists it, so a user can jump there; its time is the scenario's) and
    what the user sees there."""
    at_s = {m.name: m.at_s for m in key_moments(scenario)}[name]
    return Moment(name, at_s=at_s, **checks)


def _gpu(device: str, weights: GiB, kv: GiB, free: GiB, other: GiB = (0.0, 0.05)) -> Bar:
    return Bar(device, weights=weights, kv=kv, other=other, free=free)


# the token embeddings llama.cpp keeps in host RAM with every layer on the GPU: weights there, not a spill
_EMBEDDINGS_8B = Bar("Host", weights=(0.2, 0.4), kv=(0.0, 0.0))
_QWEN3_8B_4090 = _gpu("GPU 0", weights=(4.5, 4.9), kv=(4.4, 4.6), free=(14.0, 14.7))

STORIES: dict[str, Story] = {s.scenario: s for s in (
    Story("seed-3090x2", (
        Watch(0.0, 410.0, step_s=2.0, moments=(
            Moment("decoding on two GPUs under the ceiling", at_s=40.0, within_s=60.0, state=DECODING, ceiling=True,
                   depth=True, spilled=False, model="Qwen3.5 27B",
                   bars=(_gpu("GPU 0", weights=(7.0, 7.6), kv=(4.2, 4.45), free=(11.2, 11.9)),
                         _gpu("GPU 1", weights=(7.0, 7.6), kv=(4.2, 4.45), free=(11.2, 11.9)),
                         Bar("Host", weights=(0.6, 0.8), kv=(0.0, 0.0)))),
            Moment("the forecast at 128K and 256K, from 60K", at_s=400.0,
                   forecast=Forecast((131072, 262144), within=0.10)),
        )),
        Watch(1500.0, 1540.0, step_s=2.0, moments=(
            _key("seed-3090x2", "deep in the chat", within_s=40.0, state=DECODING, ceiling=True, depth=True,
                   level="ok", says=("of the memory-bus ceiling at 19",)),
        )),
        Watch(2100.0, 2240.0, step_s=2.0, moments=(
            Moment("a new chat decodes fast again", at_s=2203.0, within_s=30.0, state=DECODING, ceiling=True,
                   depth=True),
        ), alerts=(
            Alert("context full soon, at 256K", "ctx_full_soon", "warning", not_before_s=2100.0, by_depth=258048,
                  gone_s=2203.0, clear_within_s=20.0),
        )),
    )),
    Story("spill-4090", (
        Watch(0.0, 430.0, step_s=2.0, moments=(
            _key("spill-4090", "decoding in VRAM", within_s=20.0, state=DECODING, level="ok",
                   says=("of the memory-bus ceiling at",)),
            _key("spill-4090", "VRAM running out", level="critical",
                   says=("VRAM full in", "on GPU 0: another program is taking VRAM")),
            _key("spill-4090", "VRAM and context full", level="critical",
                   says=("Context full in ~", "VRAM is full on GPU 0: a larger -c would spill to host RAM")),
            _key("spill-4090", "spilled after the reload", within_s=20.0, state=DECODING, level="critical",
                   says=("Spilled: ", "of the KV cache in host RAM — capped at ~", "tok/s before the reload)")),
            Moment("decoding, the model in VRAM", at_s=90.0, within_s=40.0, state=DECODING, ceiling=True, depth=True,
                   spilled=False, bars=(_gpu("GPU 0", weights=(4.0, 4.5), kv=(3.9, 4.1), free=(13.5, 14.2),
                                             other=(0.9, 1.1)), _EMBEDDINGS_8B)),
            Moment("the forecast at 16K and 32K", at_s=100.0, forecast=Forecast((16384, 32768), within=0.10)),
            Moment("another program takes the VRAM", at_s=250.0, alerts=("vram_full_soon", "ctx_full_soon"),
                   bars=(_gpu("GPU 0", weights=(4.0, 4.5), kv=(3.9, 4.1), free=(3.0, 5.0), other=(10.0, 12.0)),
                         _EMBEDDINGS_8B)),
            Moment("reloading with a 128K context", at_s=330.0, within_s=6.0, state=LOADING),
            Moment("spilled: layers and KV cache in host RAM", at_s=350.0, within_s=40.0, state=DECODING,
                   ceiling=True, depth=True, spilled=True, alerts=("kv_in_host", "weights_in_host"),
                   bars=(_gpu("GPU 0", weights=(1.5, 2.0), kv=(6.3, 6.7), free=(0.0, 0.5), other=(14.5, 15.0)),
                         Bar("Host", weights=(2.6, 3.1), kv=(9.3, 9.7)))),
            Moment("the forecast after the spill, under its ceiling", at_s=420.0,
                   forecast=Forecast((65536, 131072), within=None)),
        ), alerts=(
            # other VRAM grows from 120 s; at that pace it is gone at ~302 s
            Alert("VRAM full soon: warned two minutes ahead", "vram_full_soon", "warning", not_before_s=120.0,
                  by_s=185.0, gone_s=300.0),
            Alert("VRAM full soon: critical under a minute ahead", "vram_full_soon", "critical", not_before_s=200.0,
                  by_s=256.0, gone_s=300.0),
            Alert("context full soon: warned 4K tokens ahead", "ctx_full_soon", "warning", not_before_s=150.0,
                  by_depth=28672, gone_s=330.0),
            Alert("context full: critical at the last 512 tokens", "ctx_full_soon", "critical", not_before_s=250.0,
                  by_depth=32256, gone_s=330.0),
            # VRAM full from ~300 s: a standing warning until the reload spills (then the spill is the news)
            Alert("VRAM full: a standing warning", "vram_full", "warning", not_before_s=285.0, by_s=304.0,
                  gone_s=340.0),
            Alert("the KV cache spilled", "kv_in_host", "critical", not_before_s=330.0, by_s=346.0),
            Alert("the model partly on the CPU", "weights_in_host", "warning", not_before_s=330.0, by_s=346.0),
        )),
    )),
    Story("ollama-partial", (
        Watch(0.0, 150.0, step_s=1.0, moments=(
            Moment("decoding", at_s=10.0, within_s=20.0, state=DECODING, depth=True, model="gemma3:27b"),
            _key("ollama-partial", "partly on the CPU", within_s=10.0, state=DECODING, level="warning",
                   says=("Partly on the CPU: ", "of weights in host RAM — capped at ~")),
            Moment("a ceiling and the share of it", at_s=10.0, within_s=20.0, state=DECODING, ceiling=True),
            Moment("weights on the GPU and in host RAM", at_s=10.0, spilled=True,
                   bars=(Bar("GPU 0", weights=(10.5, 13.5), compute=(0.0, 2.0)), Bar("Host", weights=(2.5, 4.5)))),
            Moment("the forecast under the ceiling", at_s=120.0, forecast=Forecast((8192, 16384), within=0.15)),
        ), alerts=(
            Alert("the partial offload warned within its hold time", "weights_in_host", "warning", not_before_s=0.0,
                  by_s=15.0),
        ), allowed=("kv_in_host",)),  # the layers on the CPU keep their KV cache in host RAM: true, and worth saying
    )),
    Story("vllm", (
        Watch(0.0, 640.0, step_s=2.0, moments=(  # long enough for the chat to reach 28K at bf16 speeds too
            Moment("decoding under the ceiling", at_s=20.0, within_s=40.0, state=DECODING, ceiling=True, depth=True,
                   model="Qwen/Qwen3-8B"),
            Moment("a bf16 ceiling", at_s=20.0, within_s=40.0, state=DECODING, ceiling_tok_s=(45.0, 65.0)),
            _key("vllm", "decoding in VRAM", within_s=40.0, state=DECODING, level="ok",
                   says=("of the memory-bus ceiling",)),
            Moment("bf16 weights and the KV pool on the GPU", at_s=20.0, spilled=False,
                   bars=(Bar("GPU 0", weights=(14.5, 16.0), kv=(1.0, 9.5)),)),
            Moment("idle between two requests", at_s=50.0, within_s=40.0, state=IDLE),
            Moment("the forecast at 16K", at_s=120.0, forecast=Forecast((16384,), within=0.10)),
        ), alerts=(
            Alert("context full soon", "ctx_full_soon", "warning", not_before_s=150.0, by_depth=28672),
        )),
    )),
    Story("lmstudio", (
        Watch(0.0, 480.0, step_s=2.0, moments=(
            Moment("the first reply: depth and ceiling", at_s=4.0, within_s=14.0, state=DECODING, ceiling=True,
                   depth=True),
            Moment("decoding under the ceiling", at_s=130.0, within_s=40.0, state=DECODING, ceiling=True,
                   depth=True, spilled=False, model="google/gemma-3-12b",
                   bars=(_gpu("GPU 0", weights=(6.5, 7.0), kv=(1.3, 1.6), free=(6.7, 7.2)),)),
            Moment("the forecast at 8K", at_s=100.0, forecast=Forecast((8192,), within=0.10)),
            _key("lmstudio", "decoding through the proxy", within_s=40.0, state=DECODING, level="ok",
                   says=("of the memory-bus ceiling",)),
        ), alerts=(
            Alert("context full soon", "ctx_full_soon", "warning", not_before_s=300.0, by_depth=12288),
        )),
    )),
    Story("power-cap-4090", (
        Watch(0.0, 420.0, step_s=2.0, moments=(
            _key("power-cap-4090", "decoding at the full memory clock", within_s=30.0, state=DECODING, ceiling=True,
                   depth=True, spilled=False, level="ok", says=("of the memory-bus ceiling at",),
                   bars=(_gpu("GPU 0", weights=(4.0, 4.5), kv=(3.9, 4.1), free=(14.5, 15.3)), _EMBEDDINGS_8B)),
            _key("power-cap-4090", "the power cap holds the memory clock down", within_s=40.0, state=DECODING,
                   ceiling=True, depth=True, level="info",
                   says=("of the memory-bus ceiling at", "— memory clock at 60% of its maximum (power cap)")),
            _key("power-cap-4090", "the cap lifted: full speed again", within_s=40.0, state=DECODING, level="ok",
                   says=("of the memory-bus ceiling at",)),
            # later speeds at 16K are the throttled ones: the forecast is held to the ceiling only
            Moment("the forecast at 16K, under its ceiling", at_s=100.0, forecast=Forecast((16384,), within=None)),
        )),
    )),
    Story("agent-cache-miss", (
        Watch(0.0, 120.0, step_s=2.0, moments=(
            Moment("the agent decodes under the ceiling", at_s=10.0, within_s=30.0, state=DECODING, ceiling=True,
                   depth=True, spilled=False,
                   bars=(_gpu("GPU 0", weights=(4.0, 4.5), kv=(7.9, 8.1), free=(10.5, 11.3)), _EMBEDDINGS_8B)),
            _key("agent-cache-miss", "its prompt read again whole: the clock in its system prompt", within_s=40.0,
                   level="warning", alerts=("prompt_cache_miss",),
                   says=("Cache miss: ", " prompt tokens read again, ",
                         "— system message changed at character 40 — looks like a timestamp")),
            Moment("the forecast at 32K", at_s=100.0, forecast=Forecast((32768,), within=None)),
        ), alerts=(
            Alert("the cache miss, named", "prompt_cache_miss", "warning", not_before_s=0.0, by_s=30.0),
        )),
    )),
    Story("cpu-ddr5", (
        Watch(0.0, 260.0, step_s=2.0, moments=(
            Moment("decoding on the CPU under the ceiling", at_s=110.0, within_s=40.0, state=DECODING, ceiling=True,
                   depth=True, spilled=False, bars=(Bar("Host", weights=(4.4, 4.8), kv=(3.9, 4.1)),)),
            Moment("the forecast at 8K and 16K", at_s=150.0, forecast=Forecast((8192, 16384), within=0.10)),
            _key("cpu-ddr5", "decoding on the CPU", within_s=40.0, state=DECODING, level="info",
                   says=("Decoding on the CPU at ", "of the memory-bus ceiling")),
        ), alerts=(
            Alert("decoding on the CPU, said at once", "cpu_only", "info", not_before_s=0.0, by_s=2.0),
        )),
    )),
    Story("apple-m2max", (
        Watch(0.0, 240.0, step_s=2.0, moments=(
            Moment("decoding from unified memory under the ceiling", at_s=20.0, within_s=40.0, state=DECODING,
                   ceiling=True, depth=True, spilled=False,
                   bars=(Bar("Unified", weights=(38.5, 39.5), kv=(7.3, 7.7), free=(10.0, 11.2)),)),
            # Metal's attention kernels change past 8K: the forecast stops there until the session goes deeper
            Moment("the forecast at 8K, kernel-dependent beyond", at_s=150.0, forecast=Forecast((8192,), within=0.10)),
            _key("apple-m2max", "near Metal's limit", level="warning",
                   says=("Near the GPU memory limit: model and caches need ", "Metal lets the GPU use")),
        ), alerts=(
            Alert("close to Metal's working-set limit, said at once", "unified_working_set", "warning",
                  not_before_s=0.0, by_s=2.0),
        )),
    )),
    Story("router", (
        Watch(0.0, 130.0, step_s=1.0, moments=(
            Moment("qwen3-8b loading", at_s=3.0, within_s=6.0, state=LOADING, models=(("qwen3-8b", "loading"),)),
            Moment("qwen3-8b decoding under the ceiling", at_s=15.0, within_s=30.0, state=DECODING, ceiling=True,
                   depth=True, model="qwen3-8b", bars=(_QWEN3_8B_4090,)),
            Moment("gemma-3-12b takes over; qwen3-8b still holds its VRAM", at_s=72.0, within_s=20.0,
                   state=DECODING, ceiling=True, depth=True, model="gemma-3-12b",
                   bars=(_gpu("GPU 0", weights=(6.6, 7.0), kv=(0.7, 0.9), free=(5.8, 6.2), other=(9.4, 9.9)),)),
            _key("router", "the broken model failed to load", models=(("broken-model", "failed"),),
                   level="warning", says=("broken-model failed to load (exit status 1)",)),
            Moment("qwen3-8b asleep: its VRAM free again", at_s=105.0, models=(("qwen3-8b", "sleeping"),),
                   bars=(_gpu("GPU 0", weights=(6.6, 7.0), kv=(0.7, 0.9), free=(15.4, 15.9)),)),
            Moment("the forecast at 8K for gemma-3-12b", at_s=120.0, model="gemma-3-12b",
                   forecast=Forecast((8192,), within=0.10)),
        ), alerts=(
            # it fails 2 s after its load at 75 s, and the router lists it failed from then on: a standing warning
            Alert("the broken model's failure, as long as it is listed", "model_failed", "warning", not_before_s=76.0,
                  by_s=80.0),
        )),
    )),
    Story("llama-swap", (
        Watch(0.0, 140.0, step_s=1.0, moments=(
            Moment("qwen3-8b starting", at_s=3.0, within_s=5.0, state=LOADING),
            Moment("qwen3-8b decoding under the ceiling", at_s=9.0, within_s=30.0, state=DECODING, ceiling=True,
                   depth=True, model="qwen3-8b", bars=(_QWEN3_8B_4090,)),
            _key("llama-swap", "swapping to gemma-3-12b", within_s=8.0, state=LOADING, level="info",
                   says=("Loading gemma-3-12b",)),
            Moment("gemma-3-12b decoding; qwen3-8b gone", at_s=78.0, within_s=30.0, state=DECODING, ceiling=True,
                   depth=True, model="gemma-3-12b", models=(("qwen3-8b", "unloaded"),),
                   bars=(_gpu("GPU 0", weights=(6.6, 7.0), kv=(0.7, 0.9), free=(15.4, 15.9)),)),
            Moment("the forecast at 8K for gemma-3-12b", at_s=130.0, model="gemma-3-12b",
                   forecast=Forecast((8192,), within=0.10)),
        )),
    )),
)}

