"""Servers that serve several models (llama-server's router mode, llama-swap): the models, which one kvmon follows,
and the loads, unloads and sleeps between two polls. Pure values and rules, no I/O.

A *model listing* is what such a server says about its models at one poll (``ModelListing``); the Snapshot of the
followed model carries a ``ServingView``: every model with its status and, for the running ones, their own
readings, plus the events since the previous poll (they are recorded with the Snapshot and drawn on the plots).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

# A model's status, in the router's words (``server_model_status_to_string``); llama-swap's process states map
# onto them (starting → loading, ready → loaded, stopping → unloading, stopped → unloaded).
LOADED = "loaded"
LOADING = "loading"
SLEEPING = "sleeping"
UNLOADED = "unloaded"
UNLOADING = "unloading"
DOWNLOADING = "downloading"
FAILED = "failed"  # unloaded after a non-zero exit
RUNNING_STATUSES = frozenset({LOADED, LOADING, SLEEPING, UNLOADING})  # a child process exists

ROUTER = "router"
LLAMA_SWAP = "llama-swap"
SERVING_LABELS: Mapping[str, str] = {ROUTER: "llama-server router", LLAMA_SWAP: "llama-swap"}


@dataclass(frozen=True)
class ListedModel:
    """One model as the serving process lists it (no per-model endpoint asked yet)."""

    name: str
    status: str
    progress: float | None = None  # 0..1 while loading (router: /models/sse), else None
    args: tuple[str, ...] = ()  # the child's command line as the server renders it (router args, llama-swap cmd)
    upstream_url: str | None = None  # where the model's own server answers (llama-swap's proxy), when known
    exit_code: int | None = None  # after a failed load or a crash
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModelListing:
    """What a serving process says at one poll: its models, and why progress or other parts are unknown."""

    kind: str  # ROUTER | LLAMA_SWAP
    models: tuple[ListedModel, ...] = ()
    server_version: str | None = None
    reasons: Mapping[str, str] = field(default_factory=dict)

    def running(self) -> tuple[ListedModel, ...]:
        return tuple(m for m in self.models if m.status in RUNNING_STATUSES)


@dataclass(frozen=True)
class ServedModel:
    """One model in the Snapshot: its status and, while it runs and was read, its own numbers."""

    name: str
    status: str
    progress: float | None = None
    followed: bool = False
    processing: bool | None = None  # a slot generates or reads a prompt (None: not read)
    decode_tok_s: float | None = None
    context_tokens: int | None = None
    n_ctx: int | None = None
    n_slots: int | None = None
    kv_allocated_bytes: int | None = None
    kv_in_use_bytes: int | None = None
    weight_bytes: int | None = None
    alerts: int = 0  # warnings and worse on this model's own Snapshot
    note: str | None = None  # why it is not read ("sleeping: not polled, /slots would wake it"), a failure


@dataclass(frozen=True)
class ServingEvent:
    """A load, unload, sleep, wake or failure seen between two polls, or kvmon starting to follow another model."""

    t_monotonic: float
    t_wall: float
    model: str
    kind: str  # "loading" | "loaded" | "unloaded" | "failed" | "sleeping" | "woke" | "followed"
    message: str


@dataclass(frozen=True)
class ServingView:
    """The serving process behind a Snapshot: its models, the followed one and why, and this poll's events."""

    kind: str
    models: tuple[ServedModel, ...] = ()
    followed: str | None = None
    follow_reason: str | None = None  # "generating", "used last", "shown before", "the only model loaded", "chosen"
    events: tuple[ServingEvent, ...] = ()
    message: str | None = None  # the state in one line when no model is shown ("no model loaded", "loading 42 %")


def status_word(m: ListedModel | ServedModel) -> str:
    """The status as a person reads it: "loading 42 %", "sleeping", "failed (exit 1)"."""
    if m.status == LOADING and m.progress is not None:
        return f"loading {m.progress * 100:.0f} %"
    if m.status == FAILED:
        code = getattr(m, "exit_code", None)
        return f"failed (exit {code})" if code is not None else "failed"
    return m.status


def state_message(kind: str, listing: Sequence[ListedModel]) -> str | None:
    """One line for a serving process with no model to show (nothing loaded, or only loading/sleeping ones)."""
    label = SERVING_LABELS.get(kind, kind)
    if not listing:
        return f"{label}: no models configured"
    running = [m for m in listing if m.status in RUNNING_STATUSES]
    loading = [m for m in running if m.status == LOADING]
    if loading:
        return "; ".join(f"{m.name} {status_word(m)}" for m in loading)
    if running and all(m.status == SLEEPING for m in running):
        names = ", ".join(m.name for m in running)
        return f"{names} sleeping (idle; unloaded until the next request)"
    if not running:
        return (f"{label}: no model loaded ({len(listing)} available; it loads one on the first request)")
    return None


def transition_events(previous: Mapping[str, ListedModel] | None, now: Sequence[ListedModel], t_monotonic: float,
                      t_wall: float) -> list[ServingEvent]:
    """The loads, unloads, sleeps, wakes and failures between two listings (none on the first one)."""
    if previous is None:
        return []
    out: list[ServingEvent] = []

    def ev(name: str, kind: str, message: str) -> None:
        out.append(ServingEvent(t_monotonic, t_wall, name, kind, message))

    for m in now:
        before = previous.get(m.name)
        old = before.status if before is not None else UNLOADED
        new = m.status
        if old == new:
            continue
        if new == LOADING:
            ev(m.name, "loading", f"{m.name} loading")
        elif new == LOADED and old == SLEEPING:
            ev(m.name, "woke", f"{m.name} woke up")
        elif new == LOADED:
            ev(m.name, "loaded", f"{m.name} loaded")
        elif new == SLEEPING:
            ev(m.name, "sleeping", f"{m.name} fell asleep (idle)")
        elif new == FAILED:
            code = f" (exit {m.exit_code})" if m.exit_code is not None else ""
            ev(m.name, "failed", f"{m.name} stopped with an error{code}")
        elif new == UNLOADED and old in RUNNING_STATUSES:
            ev(m.name, "unloaded", f"{m.name} unloaded")
    gone = set(previous) - {m.name for m in now}
    for name in sorted(gone):
        if previous[name].status in RUNNING_STATUSES:
            ev(name, "unloaded", f"{name} unloaded")
    return out


@dataclass(frozen=True)
class FollowState:
    """What the follow rule remembers between polls: the model followed and the last one seen generating."""

    followed: str | None = None
    last_busy: str | None = None


def choose_followed(state: FollowState, listing: Sequence[ListedModel], busy: Mapping[str, float],
                    pinned: str | None = None) -> tuple[FollowState, str | None, str | None]:
    """(new state, the model to follow, why): the one chosen by the user, else the one generating (the fastest
    if several), else the one used last, else the one followed before, else the only or first loaded model.

    ``busy``: running models whose slots are processing now, with their decode rate (0 when not yet known).
    """
    # a model being unloaded was stopped on purpose (a swap, a ttl, an unload): it is not followed while it goes
    running = {m.name: m for m in listing if m.status in RUNNING_STATUSES and m.status != UNLOADING}
    last_busy = state.last_busy
    if busy:
        last_busy = max(busy, key=lambda n: (busy[n], n))
    if pinned is not None and pinned in running:
        return FollowState(pinned, last_busy), pinned, "chosen"
    if busy and last_busy is not None:
        return FollowState(last_busy, last_busy), last_busy, "generating"
    if last_busy in running:
        return FollowState(last_busy, last_busy), last_busy, "used last"
    if state.followed in running:
        return FollowState(state.followed, last_busy), state.followed, "shown before"
    loaded = [n for n, m in running.items() if m.status == LOADED] or list(running)
    if not loaded:
        return FollowState(None, last_busy), None, None
    pick = loaded[0]
    return FollowState(pick, last_busy), pick, "the only model loaded" if len(running) == 1 else "loaded first"
