"""What a measured speed-vs-context curve belongs to: the configuration it was measured on, and the curve the atlas of
every measured curve holds for one (``kvmon.app.atlas`` keeps them on disk; this module does no I/O).

Two measurements belong to one curve when the model file, the devices and how the model sits on them, the cache
types, flash attention, n_ctx and slots, and the backend and its version are the same: any of those moves the curve.
``differences`` says in a user's words what differs between two ("KV q8_0 vs f16", "-fa on vs off"). What one poll
measured on is ``kvmon.core.curve_identity.config_of`` (this module is below the Snapshot, which carries an
``AtlasView``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, Protocol

from kvmon.core.backend import Backend, backend_of

SHARE_STEP = 0.05  # a device's share of the weights is kept to 5 %: a few MiB of buffers never make a new curve

PointKind = Literal["earlier", "sweep"]  # measured before this session began / by a sweep in this session
Words = Callable[[str | None], Backend]  # a backend's words by name (``kvmon.sources.backends.by_name``)


@dataclass(frozen=True)
class CurveConfig:
    """One configuration's identity (None: not known; two configs compare equal field by field)."""

    backend: str | None
    server_version: str | None
    model: str | None  # the model's name for people
    model_bytes: int | None  # the weights' size: with the name and quantization, the model file's identity
    quantization: str | None
    arch: str | None
    devices: tuple[str, ...] = ()  # the devices holding the model's weights, in order ("RTX 3090", "host")
    weight_shares: tuple[float, ...] = ()  # each device's share of the weights, to SHARE_STEP
    kv_type_k: str | None = None
    kv_type_v: str | None = None
    flash_attn: str | None = None
    n_ctx: int | None = None
    n_slots: int | None = None

    def key(self) -> str:
        """A stable text of every field: what the atlas files the curve under."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_json(raw: Any) -> CurveConfig:
        """The config a ``key()`` (or a sweep file's ``config``) holds, read as JSON; ValueError or TypeError for what
        is not one."""
        if not isinstance(raw, dict):
            raise ValueError("not a curve configuration")
        names = {f.name for f in fields(CurveConfig)}
        # JSON's values, as key() wrote them from these fields
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items() if k in names}
        return CurveConfig(**values)

    def merged(self, earlier: CurveConfig | None) -> CurveConfig:
        """This config with what it does not know taken from ``earlier`` when everything it does know agrees (a poll
        whose GPU reading failed, a log not read yet): an unknown never starts a new curve."""
        if earlier is None or earlier == self:
            return self
        mine, theirs = asdict(self), asdict(earlier)
        if any(v not in (None, ()) and theirs[k] not in (None, ()) and v != theirs[k] for k, v in mine.items()):
            return self
        return CurveConfig(**{k: (theirs[k] if v in (None, ()) else v) for k, v in mine.items()})

    def label(self, words_of: Words = backend_of) -> str:
        """The configuration for people: "tiny-llama F32 · KV f16 · -fa auto · n_ctx 8,192 on CPU (llama-server)"."""
        words = words_of(self.backend)
        parts = [" ".join(x for x in (self.model or "a model", self.quantization) if x)]
        if self.kv_type_k:
            parts.append(f"KV {self.kv_type_k}" + (f"/{self.kv_type_v}" if self.kv_type_v != self.kv_type_k else ""))
        if self.flash_attn:
            parts.append(f"{_fa_word(words)} {self.flash_attn}")
        if self.n_ctx:
            parts.append(f"n_ctx {self.n_ctx:,}")
        where = placement_words(self.devices, self.weight_shares)
        return " · ".join(parts) + (f" on {where}" if where else "") + f" ({words.label}"\
            + (f" {self.server_version})" if self.server_version else ")")


def _fa_word(backend: Backend) -> str:
    """How the server names flash attention: its flag when it has one (llama-server's -fa)."""
    words = backend.flash_attention_setting.split()
    return words[0] if words and words[0].startswith("-") else "flash attention"


def placement_words(devices: Sequence[str], shares: Sequence[float]) -> str:
    """Where the weights are: "RTX 3090", "RTX 3090 60% + host 40%", "CPU" (host alone)."""
    if not devices:
        return ""
    if len(devices) == 1:
        return "CPU" if devices[0] == "host" else devices[0]
    return " + ".join(f"{d} {s:.0%}" for d, s in zip(devices, shares, strict=False))


def difference_parts(a: CurveConfig, b: CurveConfig, words_of: Words = backend_of) -> tuple[tuple[str, str, str], ...]:
    """(what, a's, b's) for everything that differs between two configurations: ("KV", "q8_0", "f16")."""
    out: list[tuple[str, str, str]] = []

    def vs(x: Any, y: Any, word: str = "", fmt: Any = str) -> None:
        if x != y:
            out.append((word, "?" if x is None else fmt(x), "?" if y is None else fmt(y)))

    if (a.model, a.model_bytes, a.quantization) != (b.model, b.model_bytes, b.quantization):
        same_name = a.model == b.model
        vs(a.quantization if same_name else a.model, b.quantization if same_name else b.model)
    kv_a = a.kv_type_k if a.kv_type_k == a.kv_type_v else f"{a.kv_type_k}/{a.kv_type_v}"
    kv_b = b.kv_type_k if b.kv_type_k == b.kv_type_v else f"{b.kv_type_k}/{b.kv_type_v}"
    vs(kv_a, kv_b, "KV")
    vs(a.flash_attn, b.flash_attn, _fa_word(words_of(a.backend)))
    vs(a.n_ctx, b.n_ctx, "n_ctx", lambda n: f"{n:,}")
    vs(a.n_slots, b.n_slots, "slots")
    vs(placement_words(a.devices, a.weight_shares) or None, placement_words(b.devices, b.weight_shares) or None)
    if a.backend != b.backend:
        vs(words_of(a.backend).label, words_of(b.backend).label)
    else:
        vs(a.server_version, b.server_version)
    return tuple(out)


def differences(a: CurveConfig, b: CurveConfig, words_of: Words = backend_of) -> tuple[str, ...]:
    """What differs between two configurations, each in a user's words ("KV q8_0 vs f16", "-fa on vs off",
    "b11549 vs b11601"); () when they are the same curve."""
    return tuple(f"{w} {x} vs {y}".strip() for w, x, y in difference_parts(a, b, words_of))


@dataclass(frozen=True)
class CurvePoint:
    """One remembered (depth, decode speed): a mean over the measurements of one depth bin of one session or sweep."""

    context_tokens: float
    decode_tok_s: float
    kind: PointKind
    t_wall: float  # when it was last measured


@dataclass(frozen=True)
class AtlasView:
    """What the atlas remembers of the current configuration: the points measured before this session and by this
    session's sweeps (this session's own polls are the store's), and when."""

    config: CurveConfig | None = None  # the configuration the points were measured on (None: not known yet)
    points: tuple[CurvePoint, ...] = ()
    sweeps: int = 0  # sweeps of this configuration remembered
    last_t_wall: float | None = None

    @property
    def deepest_tokens(self) -> int | None:
        return int(max(p.context_tokens for p in self.points)) if self.points else None


def atlas_json(view: AtlasView | None) -> dict[str, Any] | None:
    """``once --json``'s ``atlas``: how many points, the deepest depth, when (docs/once-json.md); null when no
    configuration is known or no atlas is kept."""
    if view is None:
        return None
    return {"points": len(view.points), "earlier_points": sum(p.kind == "earlier" for p in view.points),
            "sweeps": view.sweeps, "deepest_tokens": view.deepest_tokens, "last_measured_unix_s": view.last_t_wall}


class CurveMemory(Protocol):
    """Where the analysis asks for the earlier points of a configuration (``kvmon.app.atlas``); ``version`` moves
    when a sweep adds some, so the forecast asks again."""

    @property
    def version(self) -> int: ...

    def view(self, config: CurveConfig) -> AtlasView:
        """The remembered points of ``config`` (never raises: what cannot be read is no points)."""
        ...
