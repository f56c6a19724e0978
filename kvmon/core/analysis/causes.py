"""Why decode runs below the memory-bus ceiling at this depth: the gap broken down into named causes, each with its
evidence and, where it can be estimated, its share of the gap.

The gap is time: a token takes ``1 / decode`` seconds where the ceiling allows ``1 / ceiling``; each cause adds its
own seconds, and its share is those seconds over the gap (shares that add up past the whole gap are scaled to it).

- a device's memory clock below its maximum (the power cap, heat, a slowdown): its part of the measured step (its
  share at the ceiling, ``step_shares``) reads at now ÷ max of its bandwidth, so at the full clock it would take that
  share of the time;
- a PCIe link trained below its maximum while decode streams bytes over it (KV streamed from host RAM, or measured
  traffic): those bytes cross at the link's rate now instead of its maximum;
- other processes on the GPU meanwhile: the share of the GPU's time they took is time the model waited;
- the CPU's cores taken by other programs while the CPU decodes layers: the server's threads share fewer cores;
- slower than the same configuration at the same depth earlier (``EarlierSpeeds``: this session's own points, and
  the atlas's measured curves of the configuration, ``AtlasSpeeds``): the difference in time per token;
- the drafting of speculative decoding: the drafter's reads are that share of each step (the gap taken as spread
  over the bytes read);
- the client's view slower than the server's (through ``kvmon proxy``): not part of the gap, said beside it.

What remains is said as such, against what is typical at this depth for this kind of attention
(``kvmon.physics.attention_prior``). Pure: no I/O; the session's earlier speeds are kept by ``SessionSpeeds``.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kvmon.core.curve_config import AtlasView
from kvmon.core.snapshot import GpuView, HostView, SlowdownCause, SpeculativeView
from kvmon.core.units import fmt_duration, fmt_percent, fmt_tok_s, fmt_tokens
from kvmon.physics.attention_prior import prior_for
from kvmon.physics.gpus import pcie_bandwidth_bytes_per_s

MIN_GAP = 0.05  # decode within 5% of the ceiling: no gap worth breaking down
CLOCK_BELOW = 0.95  # a clock under this share of its maximum while decoding is held down
LINK_TRAFFIC_BYTES_PER_S = 0.5e9  # PCIe traffic worth the link's rate: a spill, a split, weights streamed
OTHERS_BUSY_PERCENT = 5.0  # other processes took at least this share of the GPU's time
SLOWER_BY = 0.10  # slower than earlier at this depth by at least this fraction
CLIENT_SLOWER = 0.7  # the client saw less than this share of the server's rate (a stream's own jitter stays above)
UNEXPLAINED_SAID = 0.10  # a remainder under this share of the gap is not said
DEPTH_NEAR = 0.10  # "the same depth": within 10% (and at least NEAR_TOKENS)
NEAR_TOKENS = 1024
EARLIER_AFTER_S = 60.0  # an earlier point is at least this old (not the same reply)
WEIGHTS_EFFICIENCY = (0.75, 0.92)  # the share of the peak bandwidth weights are read at, typically (low, high)

REASON_WORDS = {"power_cap": "power cap", "thermal": "heat", "hw_slowdown": "hardware slowdown",
                "power_brake": "power brake", "applications_clocks": "clocks set by an application",
                "sync_boost": "sync boost", "display": "display clock", "current_limit": "current limit",
                "idle": "idle"}
REASON_FIXES = {"power_cap": "raise the power limit if your cooling allows (nvidia-smi -pl) or ease the load",
                "thermal": "cool the card (airflow, fan curve, a clean heatsink)",
                "hw_slowdown": "check the card's power supply and cooling",
                "power_brake": "check the card's power supply (the board asked for a brake)",
                "applications_clocks": "reset the clocks set for applications (nvidia-smi -rac)",
                "current_limit": "check the card's power delivery"}


@dataclass(frozen=True)
class EarlierPoint:
    """A decode speed measured earlier in the same configuration, at a depth, with when (monotonic seconds, or the
    same clock's seconds for points from earlier sessions: then far in the past)."""

    context_tokens: int
    tok_s: float
    t: float


class EarlierSpeeds(Protocol):
    """Where earlier points of one configuration come from: this session's (``SessionSpeeds``), and measured curves
    kept from earlier sessions where the application keeps them."""

    def near(self, config: Hashable, context_tokens: int, before_t: float) -> Sequence[EarlierPoint]:
        """Points of ``config`` within ``DEPTH_NEAR`` of ``context_tokens`` measured before ``before_t``."""
        ...


class SessionSpeeds:
    """This session's measured points per configuration (the regime's key without the reload: a restart keeps the
    configuration, so its points compare with those before it)."""

    def __init__(self, per_config: int = 2048) -> None:
        self._points: dict[Hashable, deque[EarlierPoint]] = {}
        self._max = per_config

    def add(self, config: Hashable, context_tokens: int, tok_s: float, t: float) -> None:
        self._points.setdefault(config, deque(maxlen=self._max)).append(EarlierPoint(context_tokens, tok_s, t))

    def near(self, config: Hashable, context_tokens: int, before_t: float) -> Sequence[EarlierPoint]:
        span = max(NEAR_TOKENS, DEPTH_NEAR * context_tokens)
        return [p for p in self._points.get(config, ()) if abs(p.context_tokens - context_tokens) <= span
                and p.t <= before_t]


class AtlasSpeeds:
    """The atlas's points of this poll's configuration (measured in earlier sessions, or by sweeps) as earlier points:
    the view is of this configuration already; each point's wall-clock time is put on the session's clock."""

    def __init__(self, view: AtlasView | None, t: float, t_wall: float) -> None:
        self._points = [EarlierPoint(int(p.context_tokens), p.decode_tok_s, t - (t_wall - p.t_wall))
                        for p in (view.points if view is not None else ())]

    def near(self, config: Hashable, context_tokens: int, before_t: float) -> Sequence[EarlierPoint]:
        span = max(NEAR_TOKENS, DEPTH_NEAR * context_tokens)
        return [p for p in self._points if abs(p.context_tokens - context_tokens) <= span and p.t <= before_t]


def config_key(model: Hashable | None, n_ctx: int | None, type_k: str | None, type_v: str | None,
               n_slots: int | None, devices: Sequence[Any] | None) -> Hashable | None:
    """The configuration a speed belongs to: the model, its context and cache types, the slots, the devices the
    ceiling sums over and roughly how the bytes lie on them (a reload of the same keeps it)."""
    if model is None or not devices:
        return None
    total = sum(float(d.weight_bytes) for d in devices) or 1.0
    return (model, n_ctx, type_k, type_v, n_slots,
            tuple((str(d.name), str(d.location), round(float(d.weight_bytes) / total, 1),
                   round(float(d.kv_fraction), 1)) for d in devices))


def earlier_speed(sources: Sequence[EarlierSpeeds], config: Hashable | None, context_tokens: int | None,
                  t: float) -> tuple[float, int, float] | None:
    """(median earlier tok/s, how many points, the age of the newest in seconds) at this depth, from every source;
    None without a configuration, a depth or three earlier points."""
    if config is None or context_tokens is None:
        return None
    points = [p for s in sources for p in s.near(config, context_tokens, t - EARLIER_AFTER_S)]
    if len(points) < 3:
        return None
    return statistics.median(p.tok_s for p in points), len(points), t - max(p.t for p in points)


@dataclass(frozen=True)
class ClientView:
    """The last reply as the client received it through ``kvmon proxy`` against the server's own timing of it."""

    client_tok_s: float
    server_tok_s: float


@dataclass(frozen=True)
class GapInputs:
    """What the breakdown reads of one poll (built by the analyzer from the Snapshot's parts)."""

    decode_tok_s: float | None
    ceiling_tok_s: float | None
    context_tokens: int | None
    gpus: Sequence[GpuView] = ()
    host: HostView | None = None
    step_shares: Mapping[str, float] = field(default_factory=dict)  # "GPU 0", "PCIe 0", "host": their share
    kv_share: float | None = None  # the KV cache's share of the bytes a token reads now
    attention_class: str | None = None  # kvmon.physics.attention_prior's class of the model's attention
    n_threads: int | None = None  # the server's CPU threads (-t)
    speculative: SpeculativeView | None = None
    target_bytes_per_token: float | None = None  # what the target's step reads (speculative decoding's drafter aside)
    earlier: tuple[float, int, float] | None = None  # earlier_speed's answer
    client: ClientView | None = None


def _reasons(g: GpuView) -> str:
    why = [REASON_WORDS.get(r, r) for r in g.clock_reasons or () if r != "idle"]
    return ", ".join(why) if why else ("the driver does not say why" if g.clock_reasons is None else "no reason given")


def _fix(g: GpuView) -> str:
    fixes = [REASON_FIXES[r] for r in g.clock_reasons or () if r in REASON_FIXES]
    return fixes[0] if fixes else "check the card's power limit and cooling"


def _memory_clock(g: GpuView, part_s: float) -> tuple[float, SlowdownCause] | None:
    """A memory clock held down while decoding: the device's part of the measured step reads at now ÷ max of the
    bandwidth it would have, so at the full clock it would take that share of the time."""
    now, top = g.mem_clock_mhz, g.mem_clock_max_mhz
    if not now or not top or now >= CLOCK_BELOW * top or g.clock_reasons == ("idle",):
        return None
    ratio = now / top
    extra = part_s * (1.0 - ratio)
    why = _reasons(g)
    summary = f"memory clock at {ratio:.0%} of its maximum ({why})"
    message = (f"GPU {g.index}'s memory clock is at {now:,.0f} of {top:,.0f} MHz ({ratio:.0%}) while it decodes "
               f"({why}): its memory bus reads at that share of its peak; {_fix(g)}")
    return extra, SlowdownCause("memory_clock", None, summary, message)


def _core_clock(g: GpuView) -> SlowdownCause | None:
    """Where the memory clock is not known (Intel), the graphics clock held down for a named reason: said, not sized
    (decode waits on memory more than on the cores)."""
    now, top = g.core_clock_mhz, g.core_clock_max_mhz
    if g.mem_clock_mhz is not None or not now or not top or now >= CLOCK_BELOW * top:
        return None
    if not [r for r in g.clock_reasons or () if r != "idle"]:
        return None
    why = _reasons(g)
    return SlowdownCause("core_clock", None, f"GPU clock at {now / top:.0%} of its maximum ({why})",
                         f"GPU {g.index}'s graphics clock is at {now:,.0f} of {top:,.0f} MHz while it decodes ({why}); "
                         f"its memory clock is not known, so its cost is not sized; {_fix(g)}")


def _link(g: GpuView) -> tuple[float, float] | None:
    """(bytes/s the link carries now, at its maximum), when it trained below its maximum."""
    if None in (g.pcie_generation, g.pcie_width, g.pcie_max_generation, g.pcie_max_width):
        return None
    now = pcie_bandwidth_bytes_per_s(g.pcie_generation, g.pcie_width)
    top = pcie_bandwidth_bytes_per_s(g.pcie_max_generation, g.pcie_max_width)
    if not now or not top or now >= top * 0.99:
        return None
    return now, top


def _pcie(g: GpuView, part_s: float | None, decode: float) -> tuple[float, SlowdownCause] | None:
    """A link trained below its maximum while bytes cross it: they cross at its rate now."""
    link = _link(g)
    traffic = (g.pcie_rx_bytes_per_s or 0.0) + (g.pcie_tx_bytes_per_s or 0.0)
    if link is None or (not part_s and traffic < LINK_TRAFFIC_BYTES_PER_S):
        return None
    now, top = link
    if part_s:  # the ceiling streams KV over this link: at its maximum that part of the step takes now ÷ max
        extra = part_s * (1.0 - now / top)
    else:
        extra = traffic / decode * (1.0 / now - 1.0 / top)
    trained = f"PCIe {g.pcie_generation}.0 x{g.pcie_width}"
    summary = f"PCIe link at {trained} of {g.pcie_max_generation}.0 x{g.pcie_max_width}"
    message = (f"GPU {g.index}'s PCIe link trained at {trained} instead of {g.pcie_max_generation}.0 "
               f"x{g.pcie_max_width} ({now / 1e9:.1f} of {top / 1e9:.1f} GB/s) while {traffic / 1e9:.1f} GB/s "
               "cross it: reseat the card in a full-width slot, or check the slot's lanes in the BIOS")
    return extra, SlowdownCause("pcie_link", None, summary, message)


def _others(g: GpuView, step_s: float) -> tuple[float, SlowdownCause] | None:
    """Other processes took a share of the GPU's time: the model waited that share of it."""
    busy = g.other_processes_busy_percent
    if busy is None or busy < OTHERS_BUSY_PERCENT:
        return None
    held = (f" and hold {g.other_processes_bytes / 1024**3:.1f} GiB" if g.other_processes_bytes else "")
    summary = f"other programs use GPU {g.index} {busy:.0f}% of the time"
    message = (f"Other programs used GPU {g.index} {busy:.0f}% of the time while the model decoded{held}: close "
               "them or move them to another GPU")
    return step_s * busy / 100.0, SlowdownCause("other_processes", None, summary, message)


def _cpu(host: HostView | None, host_part_s: float, n_threads: int | None) -> tuple[float, SlowdownCause] | None:
    """Other programs keep cores busy while the CPU decodes layers: the server's threads share fewer cores."""
    if host is None or None in (host.cpu_count, host.cpu_busy_cores, host.server_cpu_cores) or host_part_s <= 0:
        return None
    cores = float(host.cpu_count or 0)
    others = max(0.0, (host.cpu_busy_cores or 0.0) - (host.server_cpu_cores or 0.0))
    threads = float(n_threads or cores)
    free = cores - others
    if free >= threads or others < 1.0:
        return None
    factor = threads / max(free, 0.5)
    extra = host_part_s * (1.0 - 1.0 / factor)  # the measured part holds the wait: uncontended it takes 1 / factor
    summary = f"other programs keep {others:.0f} of {cores:.0f} CPU threads busy"
    message = (f"Other programs keep {others:.1f} of the {cores:.0f} CPU threads busy while the server's "
               f"{threads:.0f} threads decode layers on the CPU: close them, or lower the server's threads (-t) to "
               "the cores left")
    return extra, SlowdownCause("cpu_contended", None, summary, message)


def _earlier(x: GapInputs, decode: float) -> tuple[float, SlowdownCause] | None:
    """Slower than the same configuration at the same depth earlier."""
    if x.earlier is None or x.context_tokens is None:
        return None
    before, n, age = x.earlier
    if decode >= (1.0 - SLOWER_BY) * before:
        return None
    summary = f"slower than earlier at this depth ({fmt_tok_s(before)} then)"
    message = (f"At {fmt_tokens(x.context_tokens)} the same setup decoded {fmt_tok_s(before)} earlier (median "
               f"of {n} measurements, the newest {fmt_duration(age)} ago), {fmt_tok_s(decode)} now: the server got "
               "slower with uptime, or something else runs; if it has run long, restarting it restores the speed")
    return 1.0 / decode - 1.0 / before, SlowdownCause("slower_than_before", None, summary, message)


def _drafting(x: GapInputs) -> tuple[float | None, SlowdownCause] | None:
    """Speculative decoding's drafter: its reads' part of each step (the gap taken as spread over the bytes)."""
    spec = x.speculative
    if spec is None or not spec.drafted_per_step or not spec.draft_bytes_per_token or not x.target_bytes_per_token:
        return None
    drafted = spec.drafted_per_step * spec.draft_bytes_per_token
    frac = drafted / (x.target_bytes_per_token + drafted)
    accepted = f", {fmt_percent(spec.acceptance_rate)} of them accepted" if spec.acceptance_rate is not None else ""
    summary = f"drafting reads {frac:.0%} of each step"
    message = (f"Speculative decoding drafts {spec.drafted_per_step:.1f} tokens per step{accepted}: the drafter's "
               f"reads are {frac:.0%} of each step's bytes; fewer drafted tokens (--spec-draft-n-max) cost less when "
               "few are accepted")
    return frac, SlowdownCause("drafting", frac, summary, message)


def _client(c: ClientView | None) -> SlowdownCause | None:
    if c is None or c.server_tok_s <= 0 or c.client_tok_s >= CLIENT_SLOWER * c.server_tok_s:
        return None
    return SlowdownCause("client_slower", None, f"your client receives {fmt_tok_s(c.client_tok_s)} of the server's "
                         f"{fmt_tok_s(c.server_tok_s)}",
                         f"The last reply reached the client at {fmt_tok_s(c.client_tok_s)} while the server made "
                         f"it at {fmt_tok_s(c.server_tok_s)}: the client (or the path to it) reads slowly, not the "
                         "server")


def typical_efficiency(attention_class: str | None, kv_share: float | None) -> tuple[float, float] | None:
    """What share of the ceiling decode typically reaches at this depth: weights read at 75–92% of the peak, and the
    KV cache at the peak over the attention prior's slope (its median ± one spread)."""
    if attention_class is None or kv_share is None or not 0.0 <= kv_share <= 1.0:
        return None
    prior = prior_for(attention_class)
    out = []
    for w_eff, log_b in ((WEIGHTS_EFFICIENCY[0], prior.log_b_mean + prior.log_b_sd),
                         (WEIGHTS_EFFICIENCY[1], prior.log_b_mean - prior.log_b_sd)):
        b = max(1.0, math.exp(log_b))
        out.append(1.0 / ((1.0 - kv_share) / w_eff + kv_share * b))
    return out[0], out[1]


def _unexplained(x: GapInputs, eff: float, share: float, named: bool) -> SlowdownCause | None:
    """What the named causes leave: said against what is typical at this depth for this kind of attention, with the
    share of the ceiling decode would reach without the named causes (``eff`` is that share)."""
    typical = typical_efficiency(x.attention_class, x.kv_share)
    depth = f" at {fmt_tokens(x.context_tokens)}" if x.context_tokens is not None else ""
    if typical is None:
        if not named or share < UNEXPLAINED_SAID:
            return None
        return SlowdownCause("unexplained", share, "the rest unexplained",
                             f"The rest ({share:.0%} of the gap) is not explained: attention and kernel overhead"
                             f"{depth}")
    low, high = typical
    below = eff < low
    if (not named and not below) or share < UNEXPLAINED_SAID:
        return None
    kind = "usual" if not below else "below it"
    now = f"{fmt_percent(eff)} {'without the causes above' if named else 'now'}, {kind}"
    message = (f"Attention and kernel overhead{depth}: typical for this model kind is {low:.0%}–{high:.0%} of the "
               f"ceiling ({now})" + ("" if not named else f"; {share:.0%} of the gap"))
    return SlowdownCause("unexplained", share, "below what is typical" if below else "attention and kernel overhead",
                         message)


def breakdown(x: GapInputs) -> tuple[SlowdownCause, ...]:
    """The named causes of this poll's gap, largest share first, then what remains (empty when decode is not
    measured, or within ``MIN_GAP`` of the ceiling and nothing else is worth saying)."""
    client = _client(x.client)
    decode, ceiling = x.decode_tok_s, x.ceiling_tok_s
    if not decode or not ceiling or decode >= (1.0 - MIN_GAP) * ceiling:
        return (client,) if client else ()
    t0, t = 1.0 / ceiling, 1.0 / decode
    gap = t - t0
    shares = dict(x.step_shares) if x.step_shares else {}
    found: list[tuple[float | None, SlowdownCause]] = []
    for g in x.gpus:
        part = shares.get(f"GPU {g.index}")  # its share of the step (the measured one taken as the ceiling's)
        if part is not None:
            clock = _memory_clock(g, t * part)
            if clock is not None:
                found.append(clock)
            elif (core := _core_clock(g)) is not None:
                found.append((None, core))
            if (others := _others(g, t)) is not None:
                found.append(others)
        pcie_part = shares.get(f"PCIe {g.index}")
        if part is not None or pcie_part is not None:
            link = _pcie(g, t * pcie_part if pcie_part else None, decode)
            if link is not None:
                found.append(link)
    host = _cpu(x.host, t * shares.get("host", 0.0), x.n_threads)
    if host is not None:
        found.append(host)
    earlier = _earlier(x, decode)
    if earlier is not None:
        found.append(earlier)
    drafting = _drafting(x)
    causes: list[SlowdownCause] = []
    sized = [(extra / gap, c) for extra, c in found if extra is not None]
    total = sum(s for s, _c in sized) + (drafting[0] or 0.0 if drafting else 0.0)
    scale = 1.0 / total if total > 1.0 else 1.0
    for s, c in sized:
        causes.append(SlowdownCause(c.code, min(1.0, s * scale), c.summary, c.message))
    if drafting is not None:
        d = drafting[1]
        causes.append(SlowdownCause(d.code, (d.share or 0.0) * scale, d.summary, d.message))
    causes += [c for extra, c in found if extra is None]
    causes.sort(key=lambda c: -(c.share or 0.0))
    rest = max(0.0, 1.0 - sum(c.share or 0.0 for c in causes))
    without = t0 / (t0 + rest * gap)  # the share of the ceiling decode would reach without the named causes
    left = _unexplained(x, without, rest, bool(causes))
    out = [*causes, *([left] if left else []), *([client] if client else [])]
    return tuple(out)

