"""Faults to inject into any simulated scenario, and their command-line syntax.

A fault is written ``KIND[:VALUE][@T]``; ``T`` is when it starts, in simulated seconds after the server
started (default 0, i.e. at once). Times and durations are simulated seconds (the same as real seconds
at ``--speed 1``); only the drip rate is per real second.

==================  =======================================================================================
``restart[:L]@T``   the server process restarts at T: counters reset, slots empty, a new start time;
                    it answers 503 "Loading model" for L seconds (default 2) while it loads again
``hang:N[@T]``      from T, for N seconds, requests are accepted but answered only when the hang ends
``loading:N[@T]``   from T, for N seconds, every endpoint answers 503 "Loading model"
``auth[:KEY]``      an API key is required (default ``sim-key``): 401 without it; /health stays public
``garbage[:N][@T]`` from T, for N seconds (default: for good), bodies are not JSON/metrics text
``drip[:B][@T]``    from T, response bodies trickle at B bytes per real second (default 20)
==================  =======================================================================================

Several faults may be given (``--fault restart@30 --fault hang:5@60``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

KINDS = ("restart", "hang", "loading", "auth", "garbage", "drip")
DEFAULT_API_KEY = "sim-key"


class FaultSyntaxError(ValueError):
    """A ``--fault`` value that does not follow ``KIND[:VALUE][@T]``."""


@dataclass(frozen=True)
class Fault:
    """One injected fault: ``kind``, its start ``at_s`` and its value (duration, key or rate)."""

    kind: str
    at_s: float = 0.0
    duration_s: float | None = None  # hang, loading, garbage (None: for good), restart (loading time)
    api_key: str | None = None  # auth
    drip_bytes_per_s: float | None = None  # drip

    def active(self, t: float) -> bool:
        """Whether this fault is in force at simulated time ``t``."""
        return self.at_s <= t and (self.end_s is None or t < self.end_s)

    @property
    def end_s(self) -> float | None:
        return None if self.duration_s is None else self.at_s + self.duration_s


def _number(text: str, spec: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise FaultSyntaxError(f"fault {spec!r}: {what} {text!r} is not a number") from None
    if value < 0:
        raise FaultSyntaxError(f"fault {spec!r}: {what} must not be negative")
    return value


def parse_fault(spec: str) -> Fault:
    """Parse one ``KIND[:VALUE][@T]`` string (see the module docstring); FaultSyntaxError when malformed."""
    text = spec.strip()
    if not text:
        raise FaultSyntaxError("empty fault")
    at_s = 0.0
    if "@" in text:
        text, at_text = text.rsplit("@", 1)
        at_s = _number(at_text, spec, "start time")
    kind, _, value = text.partition(":")
    kind = kind.strip().lower()
    if kind not in KINDS:
        raise FaultSyntaxError(f"fault {spec!r}: unknown kind {kind!r} (known: {', '.join(KINDS)})")
    if kind == "auth":
        return Fault("auth", at_s, api_key=value or DEFAULT_API_KEY)
    if kind == "drip":
        rate = _number(value, spec, "rate") if value else 20.0
        if rate <= 0:
            raise FaultSyntaxError(f"fault {spec!r}: drip rate must be above 0 bytes/s")
        return Fault("drip", at_s, drip_bytes_per_s=rate)
    if kind == "restart":
        return Fault("restart", at_s, duration_s=_number(value, spec, "loading time") if value else 2.0)
    if kind == "garbage":
        return Fault("garbage", at_s, duration_s=_number(value, spec, "duration") if value else None)
    if not value:
        raise FaultSyntaxError(f"fault {spec!r}: {kind} needs a duration, e.g. {kind}:10")
    return Fault(kind, at_s, duration_s=_number(value, spec, "duration"))


def parse_faults(specs: str | Fault | Iterable[object] | None) -> tuple[Fault, ...]:
    """Parse a list of fault strings (or pass Fault objects through)."""
    if specs is None:
        return ()
    if isinstance(specs, (str, Fault)):
        specs = [specs]
    return tuple(s if isinstance(s, Fault) else parse_fault(str(s)) for s in specs)


@dataclass(frozen=True)
class FaultPlan:
    """All faults of one run, with the questions the HTTP layer asks at each request."""

    faults: tuple[Fault, ...] = ()

    def restarts(self) -> list[Fault]:
        return sorted((f for f in self.faults if f.kind == "restart"), key=lambda f: f.at_s)

    def hang_until(self, t: float) -> float | None:
        """If a hang is in force at ``t``, the simulated time it ends."""
        ends = [f.end_s for f in self.faults if f.kind == "hang" and f.active(t) and f.end_s is not None]
        return max(ends) if ends else None

    def loading(self, t: float) -> bool:
        return any(f.kind == "loading" and f.active(t) for f in self.faults)

    def api_key(self, t: float) -> str | None:
        keys = [f.api_key for f in self.faults if f.kind == "auth" and f.active(t)]
        return keys[-1] if keys else None

    def garbage(self, t: float) -> bool:
        return any(f.kind == "garbage" and f.active(t) for f in self.faults)

    def drip_bytes_per_s(self, t: float) -> float | None:
        rates = [f.drip_bytes_per_s for f in self.faults if f.kind == "drip" and f.active(t)]
        return min(r for r in rates if r is not None) if rates else None
