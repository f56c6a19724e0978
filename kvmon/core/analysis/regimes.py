"""Regimes: a new fit segment whenever what decode speed depends on changes, so points from before never bend the
forecast after.

What the physics depends on: the model, its context size, the cache types, the slot count, the devices the
ceiling sums over and how the bytes are placed on them (a spill of KV or weights to host RAM or over PCIe, a
partial offload), and the server process itself (a reload). Each poll's ``RegimeKey`` is compared with the one the
current regime began with, not with the previous poll's, so a share wandering by a hair never flips back and forth;
a share counts as moved when it differs by more than ``PLACEMENT_TOLERANCE``. What a poll does not know (devices
unknown this poll, no n_ctx) changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from kvmon.core.points import ModelKey
from kvmon.core.snapshot import Regime

PLACEMENT_TOLERANCE = 0.05  # of the weights or of the KV cache


@dataclass(frozen=True)
class RegimeKey:
    """What one poll's decode speed depends on (None: not known this poll)."""

    model: ModelKey | None
    n_ctx: int | None = None
    type_k: str | None = None
    type_v: str | None = None
    n_slots: int | None = None
    devices: tuple[tuple[str, str], ...] | None = None  # (name, location) of each device the ceiling sums over
    shares: tuple[tuple[float, float], ...] | None = None  # per device: (share of the weights read, KV fraction)


def regime_key(model: ModelKey | None, n_ctx: int | None, type_k: str | None, type_v: str | None,
               n_slots: int | None, devices: Sequence[Any] | None) -> RegimeKey:
    """The key of one poll; ``devices`` are ``kvmon.physics.ceiling.DeviceShare`` (any kind, any number)."""
    if not devices:
        return RegimeKey(model, n_ctx, type_k, type_v, n_slots)
    total_w = sum(float(d.weight_bytes) for d in devices) or 1.0
    return RegimeKey(model, n_ctx, type_k, type_v, n_slots,
                     tuple((str(d.name), str(d.location)) for d in devices),
                     tuple((float(d.weight_bytes) / total_w, float(d.kv_fraction)) for d in devices))


def _ctx(n: int | None) -> str:
    return "—" if n is None else f"{n:,}"


def _where(key: RegimeKey) -> str:
    return " + ".join(name for name, _loc in key.devices or ()) or "—"


def changes(anchor: RegimeKey, now: RegimeKey) -> list[tuple[str, str]]:
    """(cause code, what changed, for people) for everything ``now`` changes against ``anchor``; [] when none."""
    out: list[tuple[str, str]] = []
    if now.model is not None and now.model != anchor.model:
        return [("model", "another model")]
    if now.n_ctx is not None and anchor.n_ctx is not None and now.n_ctx != anchor.n_ctx:
        out.append(("n_ctx", f"context {_ctx(anchor.n_ctx)} → {_ctx(now.n_ctx)}"))
    types_now, types_then = (now.type_k, now.type_v), (anchor.type_k, anchor.type_v)
    if None not in types_now and None not in types_then and types_now != types_then:
        out.append(("cache_types", f"cache {'/'.join(map(str, types_then))} → {'/'.join(map(str, types_now))}"))
    if now.n_slots is not None and anchor.n_slots is not None and now.n_slots != anchor.n_slots:
        out.append(("slots", f"slots {anchor.n_slots} → {now.n_slots}"))
    if now.devices is not None and anchor.devices is not None:
        if now.devices != anchor.devices:
            out.append(("devices", f"devices {_where(anchor)} → {_where(now)}"))
        elif now.shares is not None and anchor.shares is not None:
            moved = [(name, then, cur) for (name, _loc), then, cur in zip(now.devices, anchor.shares, now.shares,
                                                                          strict=True)
                     if abs(then[0] - cur[0]) > PLACEMENT_TOLERANCE or abs(then[1] - cur[1]) > PLACEMENT_TOLERANCE]
            if moved:
                name, then, cur = moved[0]
                out.append(("placement", f"placement on {name}: weights {then[0]:.0%} → {cur[0]:.0%}, "
                                         f"KV {then[1]:.0%} → {cur[1]:.0%}"))
    return out


def _merged(anchor: RegimeKey, now: RegimeKey) -> RegimeKey:
    """``now`` with what it does not know taken from ``anchor``."""
    return replace(now, **{f.name: getattr(anchor, f.name) for f in fields(now) if getattr(now, f.name) is None})


class RegimeTracker:
    """The current regime: ``observe`` each poll's key; it says when a new one began (and why)."""

    def __init__(self) -> None:
        self.regime = Regime()
        self._anchor: RegimeKey | None = None
        self._count = 0

    def observe(self, key: RegimeKey, *, reloaded: bool, t_monotonic: float, t_wall: float) -> bool:
        """This poll's key (and whether the server process was reloaded since the last one); True on a new regime."""
        if self._anchor is None:
            if key.model is None:
                return False
            return self._begin(key, "start", "first measurements", t_monotonic, t_wall)
        found = changes(self._anchor, key)
        if reloaded and not any(code == "model" for code, _ in found):
            found.insert(0, ("reload", "reloaded"))
        if not found:
            self._anchor = _merged(key, self._anchor)  # the start's values kept; only what it did not know is filled
            return False
        description = "; ".join(text for _code, text in found)
        return self._begin(_merged(self._anchor, key) if found[0][0] != "model" else key, found[0][0], description,
                           t_monotonic, t_wall)

    def _begin(self, key: RegimeKey, cause: str, description: str, t_monotonic: float, t_wall: float) -> bool:
        self._anchor = key
        self._count += 1
        self.regime = Regime(self._count, cause, description, t_monotonic, t_wall)
        return True

    def mark_context(self, context_tokens: int | None) -> None:
        """The depth of the regime's first measured point (once): where the plot marks the regime's start."""
        if self.regime.index and self.regime.since_context_tokens is None and context_tokens is not None:
            self.regime = replace(self.regime, since_context_tokens=context_tokens)
