"""A depth sweep of a running server: the plan (which depths, what it will cost, whether the server can take it) and
what it measured, as the seeds' table for this machine. Pure: the driving is ``kvmon.app.sweep``, each server's
requests its backend's (``kvmon.sources.<backend>.sweep``).

One conversation grows from empty to the deepest depth; the server's prompt cache keeps each step's prefix, so each
step reads only what it adds, and at each depth the server generates ``generate`` tokens whose rate is the point.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from kvmon.core.backend import Backend
from kvmon.core.curve_config import CurveConfig
from kvmon.core.snapshot import Activity, AlertLevel, Snapshot
from kvmon.core.units import fmt_bytes, fmt_duration

DEFAULT_GENERATE = 64
DEFAULT_STEPS = 8
DEPTH_STEP = 64  # depths are multiples of this (the first one, 1 token, aside)
# the KV cache sits (or would grow) past the device's memory: every depth would measure the spill
SPILL_ALERTS = ("kv_in_host", "unified_working_set")
Timing = Literal["server", "stream"]  # the server's own timings of the request, or the stream's arrival times
Outcome = Literal["done", "cancelled", "failed"]


class SweepFailed(Exception):
    """The sweep cannot go on; the message is one line for people (the server's own words where it gave some)."""


class SweepCancelled(SweepFailed):
    """The user cancelled; the request under way was cancelled on the server too."""


@dataclass(frozen=True)
class StepTiming:
    """What one request measured (None: the server did not say, and the stream could not tell)."""

    depth_tokens: int  # tokens in the conversation when generation began (cached + read now)
    prompt_tokens_read: int | None  # read by this request (the rest came from the cache)
    prompt_s: float | None
    generated: int
    decode_tok_s: float | None
    timing: Timing
    prompt_tokens_new: int | None = None  # what it added to the conversation, when the server does not say what it
    # read (the prefill rate is over these); None: the tokens read

    @property
    def added(self) -> int | None:
        return self.prompt_tokens_new if self.prompt_tokens_new is not None else self.prompt_tokens_read

    @property
    def prefill_tok_s(self) -> float | None:
        if not self.added or not self.prompt_s or self.prompt_s <= 0:
            return None
        return self.added / self.prompt_s


@dataclass(frozen=True)
class SweepPlan:
    """The depths to measure and what that costs; ``refusal`` says why the sweep must not run (None: it may)."""

    depths: tuple[int, ...]
    generate: int
    n_ctx: int | None
    slot: int | None  # the slot it will use (None: the server picks, or it has none it shows)
    kv_bytes_per_token: float | None
    kv_allocated_bytes: int | None
    refusal: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def deepest(self) -> int:
        return self.depths[-1] if self.depths else 0

    @property
    def kv_bytes_deepest(self) -> float | None:
        """The KV cache in use at the deepest depth and its generated tokens (at most what the server allocated:
        sliding-window layers stop growing at their window)."""
        if self.kv_bytes_per_token is None:
            return None
        grown = self.kv_bytes_per_token * (self.deepest + self.generate)
        return min(grown, self.kv_allocated_bytes) if self.kv_allocated_bytes else grown

    def seconds(self, prefill_tok_s: float | None, decode_tok_s: float | None) -> float | None:
        """The time it will take at these rates (None while either is unknown): reading the prompts and generating
        ``generate`` tokens at each depth."""
        if not prefill_tok_s or not decode_tok_s:
            return None
        return self.deepest / prefill_tok_s + len(self.depths) * self.generate / decode_tok_s

    def cost_lines(self, prefill_tok_s: float | None = None, decode_tok_s: float | None = None) -> list[str]:
        """What the sweep will cost, in a user's words: said before it starts."""
        # the server reads the deepest depth's prompt in all: each step reads only what it adds
        lines = [f"{len(self.depths)} depths from {self.depths[0]:,} to {self.deepest:,} tokens, {self.generate} "
                 f"generated at each: {self.deepest:,} prompt tokens to read (the cache keeps each step's prefix)"]
        secs = self.seconds(prefill_tok_s, decode_tok_s)
        if secs is not None:
            lines.append(f"{fmt_duration(secs)} at the prefill rate measured first "
                         f"({prefill_tok_s:,.0f} tok/s; deeper prompts read slower)")
        kv = self.kv_bytes_deepest
        if kv is not None:
            fits = (f", within the {fmt_bytes(self.kv_allocated_bytes)} the server reserved at load: it fits"
                    if self.kv_allocated_bytes else "")
            lines.append(f"KV cache at the deepest depth: up to {fmt_bytes(kv)}{fits}")
        lines.extend(self.notes)
        return lines


def _depths(to_tokens: int, steps: int) -> tuple[int, ...]:
    """1 (an empty conversation and its first token), then ``steps`` depths evenly up to ``to_tokens``."""
    out = [1]
    for i in range(1, steps + 1):
        d = to_tokens if i == steps else max(DEPTH_STEP, (to_tokens * i // steps) // DEPTH_STEP * DEPTH_STEP)
        if d > out[-1]:
            out.append(d)
    return tuple(out)


def plan_sweep(s: Snapshot, backend: Backend, to_tokens: int | None = None, steps: int = DEFAULT_STEPS,
               generate: int = DEFAULT_GENERATE, *, allow_spill: bool = False) -> SweepPlan:
    """The plan for sweeping the server this Snapshot read, refused (with the reason) when it would pass n_ctx,
    measure a spill (unless ``allow_spill``: the user wants the spilled curve), or cut into a reply being
    generated."""
    if steps < 1 or generate < 2:
        raise ValueError("a sweep needs at least one step and two generated tokens")
    m = s.model
    n_ctx = m.n_ctx
    slot = _free_slot(s)
    deepest = to_tokens if to_tokens is not None else (n_ctx - generate if n_ctx else None)
    base = SweepPlan(_depths(deepest, steps) if deepest and deepest > 1 else (1,), generate, n_ctx,
                     None if slot is None else slot[0], m.kv_bytes_per_token, m.kv_allocated_bytes)
    notes = () if slot is None or not slot[1] else (
        f"it replaces what slot {slot[0]} holds ({slot[1]:,} tokens of an earlier conversation)",)
    return replace(base, refusal=_refusal(s, backend, base, deepest, allow_spill), notes=notes)


def _spill(s: Snapshot, plan: SweepPlan, need: int) -> str | None:
    """Why the sweep's cache would sit past the device's memory: it does already (the analysis says so), or the
    cache lives in host RAM and its growth would not fit in what is free (the pages are taken as the context fills
    them). A cache on a GPU was reserved whole at load: the depths within n_ctx need no more."""
    now = [a for a in s.alerts if a.code in SPILL_ALERTS and a.level != AlertLevel.INFO]
    if now:
        return f"the KV cache already spills out of the device's memory ({now[0].message})"
    kv = plan.kv_bytes_deepest
    if kv is None:
        return None
    grow = kv - (s.kv_in_use_bytes or 0)
    free = s.host.ram_available_bytes
    if s.host.kv_in_host_bytes and free is not None and grow > free:
        return (f"the KV cache at {need:,} tokens takes {fmt_bytes(grow)} more of host RAM, where "
                f"{fmt_bytes(free)} is free: the machine would swap")
    return None


def _free_slot(s: Snapshot) -> tuple[int, int] | None:
    """(id, tokens it holds) of the idle slot holding the least, or None when the server shows no slots."""
    idle = [(sl.id, sl.context_tokens or 0) for sl in s.slots if not sl.processing]
    return min(idle, key=lambda x: (x[1], x[0])) if idle else None


def _refusal(s: Snapshot, backend: Backend, plan: SweepPlan, deepest: int | None, allow_spill: bool) -> str | None:
    if not s.server_read:
        return f"the server could not be read: {s.connection.reason or s.connection.status.value}"
    if deepest is None:
        return "the server does not say its context size: give the deepest depth to measure (--to TOKENS)"
    if deepest < 2:
        return "the deepest depth must be at least 2 tokens"
    need = deepest + plan.generate
    if plan.n_ctx is not None and need > plan.n_ctx:
        most = plan.n_ctx - plan.generate
        return (f"a sweep to {deepest:,} tokens needs {need:,} tokens of context ({deepest:,} + {plan.generate} "
                f"generated) and the server's slot holds {plan.n_ctx:,}: sweep to {most:,} or less, or give the "
                f"server more context ({backend.context_setting})")
    spill = _spill(s, plan, need)
    if spill and not allow_spill:
        return f"{spill}: every depth would measure the spill; free the memory first, or ask for the spilled curve"
    busy = [sl.id for sl in s.slots if sl.processing]
    if busy:
        which = "slot " + ", ".join(map(str, busy))
        return (f"a reply is being generated ({which}): a sweep now would share the memory bus with it and "
                "measure neither; try again when it has ended")
    if not s.slots and s.activity in (Activity.DECODING, Activity.PROCESSING):
        return "the server is generating a reply: try again when it has ended"
    return None


@dataclass(frozen=True)
class SweepRow:
    """One depth of the table: the seeds' columns for this machine."""

    depth_tokens: int
    decode_tok_s: float | None
    share_of_first: float | None  # of the shallowest depth's speed
    ceiling_tok_s: float | None
    efficiency: float | None  # decode ÷ ceiling
    prefill_tok_s: float | None
    prompt_tokens_read: int | None
    generated: int
    timing: Timing


@dataclass(frozen=True)
class SweepResult:
    """A finished (or cancelled) sweep: its rows, the ceiling, what it cost, and the configuration it measured."""

    server: str  # the display URL (never credentials)
    backend: str | None
    server_version: str | None
    model: str | None
    config: CurveConfig | None
    generate: int
    rows: tuple[SweepRow, ...]
    ceiling_curve: tuple[tuple[int, float], ...] = ()
    started_unix_s: float = 0.0
    wall_s: float = 0.0
    outcome: Outcome = "done"
    reason: str | None = None  # why it stopped early
    prompt_tokens_read: int | None = None  # all the requests' prompt tokens the server read (None: it did not say)
    label: str = ""  # what a comparison calls it
    notes: tuple[str, ...] = ()

    @property
    def depth_reached(self) -> int:
        return max((r.depth_tokens for r in self.rows), default=0)


def ceiling_at(curve: Sequence[tuple[int, float]], depth: float) -> float | None:
    """The ceiling at ``depth`` from the Snapshot's curve (straight between its points; None off its ends)."""
    if not curve or depth < curve[0][0] or depth > curve[-1][0]:
        return None
    for (x0, y0), (x1, y1) in itertools.pairwise(curve):
        if x0 <= depth <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (depth - x0) / (x1 - x0)
    return float(curve[-1][1])


def rows_of(steps: Sequence[tuple[StepTiming, float | None, int | None]],
            ceiling_curve: Sequence[tuple[int, float]]) -> tuple[SweepRow, ...]:
    """The table from each depth's measuring request, the step's prefill rate and the prompt tokens it read."""
    rows: list[SweepRow] = []
    first = next((t.decode_tok_s for t, _p, _r in steps if t.decode_tok_s), None)
    for t, prefill, read in steps:
        ceil = ceiling_at(ceiling_curve, t.depth_tokens)
        eff = t.decode_tok_s / ceil if t.decode_tok_s and ceil else None
        eff = eff if eff is not None and eff <= 1.0 else None  # above the ceiling: an input of it is wrong, not 120%
        share = t.decode_tok_s / first if t.decode_tok_s and first else None
        rows.append(SweepRow(t.depth_tokens, t.decode_tok_s, share, ceil, eff, prefill, read, t.generated, t.timing))
    return tuple(rows)
