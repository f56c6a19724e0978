"""GroupMonitor: one poll of a server that serves several models (llama-server's router mode, llama-swap) → the
Snapshot of the model being chatted with, carrying every model's status and numbers and this poll's events.

Each running model is read by its own source and analysed by its own Analyzer (its own rates, KV, placement,
alerts), the GPUs and the host once per poll for all of them, split per model by process. The model followed is
the one the user chose, else the one generating, else the one used last (``kvmon.core.serving.choose_followed``).
Loads, unloads, sleeps and wakes are compared between two listings and travel with the Snapshot (recorded, drawn).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from kvmon.app.monitor import CurveSink, DevicePoller, Emitter, SnapshotSink, busy_here, close_quietly, idle_here
from kvmon.core.alerts import model_failed_alerts
from kvmon.core.analysis import Analyzer, AnalyzerSettings
from kvmon.core.attribution import for_processes
from kvmon.core.connection import failure_of
from kvmon.core.deadline import current_deadline, poll_deadline
from kvmon.core.readings import (
    FailureKind,
    GpuSetReading,
    HostReading,
    ServerReading,
    SourceError,
    SourceFailure,
)
from kvmon.core.serving import (
    FAILED,
    LOADED,
    LOADING,
    SERVING_LABELS,
    SLEEPING,
    UNLOADING,
    FollowState,
    ListedModel,
    ModelListing,
    ServedModel,
    ServingEvent,
    ServingView,
    choose_followed,
    state_message,
    status_word,
    transition_events,
)
from kvmon.core.snapshot import AlertLevel, Snapshot
from kvmon.core.verdict import decided
from kvmon.sources.base import GpuSource, HostSource, ModelListSource, ServerSource

SLEEP_NOTE = "sleeping (idle): its /slots is not asked, which would wake it"


@dataclass
class _Model:
    """A running model: its source (None when it cannot be read from here), analyzer and last results."""

    source: ServerSource | None
    analyzer: Analyzer
    note: str | None = None  # why it is not read
    failed: FailureKind = FailureKind.UNREACHABLE  # what kind of failure the note is
    reading: ServerReading | None = None
    snapshot: Snapshot | None = None


class GroupMonitor(Emitter):
    """Polls a model-list source and every running model; ``poll()`` returns the followed model's Snapshot."""

    def __init__(self, source: ModelListSource, gpu_source: GpuSource | None = None,
                 host_source: HostSource | None = None, settings: AnalyzerSettings | None = None, *,
                 recorder: SnapshotSink | None = None, clock: Callable[[], float] = time.monotonic,
                 model_pids: Callable[[str], Sequence[int]] | None = None,
                 settings_source: Callable[[], AnalyzerSettings | None] | None = None,
                 timeout_s: float | None = None, curves: CurveSink | None = None) -> None:
        """``model_pids``: a model's server processes when its source cannot find them (an in-process simulator).
        ``settings_source``: asked before every poll for the settings the user has now (every model's analysis).
        ``timeout_s``: the user's timeout, one deadline for every request of a poll, the list's and every model's."""
        self.source = source
        self.timeout_s = timeout_s
        self.devices = DevicePoller(gpu_source, host_source, clock=clock)
        self.settings = settings
        self.recorder = recorder
        self.curves = curves  # the atlas of measured curves: every model's analysis reads it, the followed one feeds it
        self._clock = clock
        self._model_pids = model_pids
        self._settings_source = settings_source
        self.probes_run = 0  # the host bandwidth probes this monitor ran (at most one per machine)
        # the Snapshot when no model can be shown
        self._own = Analyzer(settings, clock=clock, settings_source=settings_source)
        self._models: dict[str, _Model] = {}
        self._previous: dict[str, ListedModel] | None = None
        self._follow = FollowState()
        self._pinned: str | None = None
        self._seq = 0

    @property
    def backend(self) -> str:
        return self.source.backend

    @property
    def display_url(self) -> str:
        return self.source.display_url

    def follow(self, name: str | None) -> None:
        """Show this model from the next poll on (None: follow the one being chatted with again)."""
        self._pinned = name or None

    def source_of(self, name: str | None) -> ServerSource | None:
        """The source of one running model (None: none named, not running, or not readable from here)."""
        m = self._models.get(name) if name is not None else None
        return m.source if m is not None else None

    # ------------------------------------------------------------------ the poll

    def poll(self) -> Snapshot:
        """Read the model list and every running model once, every request under one deadline (never raises for
        source trouble)."""
        with poll_deadline(self.timeout_s):
            return self._poll()

    def _poll(self) -> Snapshot:
        self._seq += 1
        t, wall = self._clock(), time.time()
        try:
            listing = self.source.list_models()
        except Exception as exc:  # the serving process itself is down, refuses the key, answers nonsense
            failure = failure_of(exc, FailureKind.UNEXPECTED_BODY, "model list failed")
            pids = self._pids()
            snap = self._own.update(failure, self.devices.poll_gpus(pids), self.devices.poll_host(pids))
            kind = getattr(self.source, "kind", "")
            return self._emit(replace(snap, serving=ServingView(kind, message=failure.reason), seq=self._seq))
        events = transition_events(self._previous, listing.models, t, wall)
        self._previous = {m.name: m for m in listing.models}
        running = {m.name: m for m in listing.running()}
        for name in [n for n in self._models if n not in running]:
            self._drop(name)
        for name, listed in running.items():
            self._read(name, listed)
        # the host's one-time bandwidth probe, only while every running model is read and none decodes (or loads)
        readings = [(n, m.reading) for n, m in self._models.items() if n in running]
        self.probes_run += self.devices.probe_if_idle(
            any(r is not None and busy_here(r, self._reading_pids(n, r)) for n, r in readings),
            bool(running) and len(readings) == len(running)
            and all(r is not None and idle_here(r, self._reading_pids(n, r)) for n, r in readings))
        pids = self._pids()
        gpus = self.devices.poll_gpus(pids)
        host = self.devices.poll_host(pids)
        busy = {n: (m.snapshot.decode_tok_s or 0.0) if m.snapshot is not None else 0.0
                for n, m in self._models.items()
                if m.reading is not None and any(s.processing for s in m.reading.slots)}
        before = self._follow.followed
        self._follow, followed, why = choose_followed(self._follow, listing.models, busy, self._pinned)
        for name, m in self._models.items():
            if m.reading is not None:
                m.snapshot = m.analyzer.update(m.reading, for_processes(gpus, self._reading_pids(name, m.reading)),
                                               host)
        if followed is not None and followed != before and before is not None:
            events.append(ServingEvent(t, wall, followed, "followed", f"following {followed} ({why})"))
        shown = self._shown(followed, running, listing, gpus, host, t, wall)
        view = ServingView(kind=listing.kind, models=tuple(self._served(m, followed) for m in listing.models),
                           followed=followed, follow_reason=why, events=tuple(events),
                           message=self._message(followed, running, listing))
        # a model that failed to load is a warning while the list says so, on whichever model is shown
        failed = [(m.name, m.exit_code) for m in listing.models if m.status == FAILED]
        alerts = model_failed_alerts(shown.alerts, failed, SERVING_LABELS.get(listing.kind, listing.kind))
        return self._emit(decided(replace(shown, serving=view, alerts=alerts, seq=self._seq)))

    def _read(self, name: str, listed: ListedModel) -> None:
        """Poll one running model's own server (not while it loads or stops: there is nothing to read yet)."""
        m = self._models.get(name)
        if m is None:
            source: ServerSource | None = None
            note: str | None = None
            try:
                source = self.source.model_source(listed)
            except SourceError as e:
                note = e.failure.reason
            m = self._models[name] = _Model(source, Analyzer(self.settings, clock=self._clock,
                                                             settings_source=self._settings_source,
                                                             curve_memory=self.curves), note)
        m.reading = None
        if listed.status in (LOADING, UNLOADING) or m.source is None:
            return
        deadline = current_deadline()
        mark = deadline.mark() if deadline is not None else None
        m.failed = FailureKind.UNREACHABLE
        try:
            m.reading = m.source.poll()
            m.note = SLEEP_NOTE if m.reading.state == "sleeping" else None
        except SourceError as e:
            m.note, m.failed = e.failure.reason, e.failure.kind
        except Exception as e:  # a source bug: this model goes blank, the others go on
            m.note = f"{name}: {type(e).__name__}: {e}"
        nothing = deadline.read_nothing_since(mark) if deadline is not None and mark is not None else None
        if m.reading is not None and nothing is not None:  # its server answered nothing in time: no reading
            m.reading, m.note, m.failed = None, nothing, FailureKind.TIMEOUT

    def _drop(self, name: str) -> None:
        close_quietly(self._models.pop(name).source)

    def _reading_pids(self, name: str, r: ServerReading) -> tuple[int, ...]:
        if r.server_pids:
            return tuple(r.server_pids)
        return tuple(self._model_pids(name)) if self._model_pids is not None else ()

    def _pids(self) -> tuple[int, ...]:
        pids: set[int] = set()
        for name, m in self._models.items():
            if m.reading is not None:
                pids.update(self._reading_pids(name, m.reading))
            elif self._model_pids is not None:
                pids.update(self._model_pids(name))
        return tuple(sorted(pids))

    def _shown(self, followed: str | None, running: dict[str, ListedModel], listing: ModelListing,
               gpus: GpuSetReading | None, host: HostReading | None, t: float, wall: float) -> Snapshot:
        """The followed model's Snapshot; a loading or unreadable one says so; none: the serving process's state."""
        m = self._models.get(followed) if followed is not None else None
        if m is not None and m.snapshot is not None and m.reading is not None:
            if not listing.reasons:
                return m.snapshot
            return replace(m.snapshot, reasons={**m.snapshot.reasons,  # what the list did not say, too
                                                **{f"serving.{k}": v for k, v in listing.reasons.items()}})
        if m is not None and followed is not None:
            listed = running[followed]
            if listed.status == LOADING:
                failure = SourceFailure(FailureKind.MODEL_LOADING, f"{followed} {status_word(listed)}")
            else:
                failure = SourceFailure(m.failed, m.note or f"{followed} {status_word(listed)}")
            return m.analyzer.update(failure, for_processes(gpus, ()), host)
        message = state_message(listing.kind, listing.models) or "no model to show"
        reading = ServerReading(t_monotonic=t, t_wall=wall, backend=self.source.backend, url=self.display_url,
                                server_version=listing.server_version, state="idle",
                                reasons={**listing.reasons, "model": message})
        return self._own.update(reading, gpus, host)

    def _served(self, listed: ListedModel, followed: str | None) -> ServedModel:
        m = self._models.get(listed.name)
        s = m.snapshot if m is not None and m.reading is not None else None
        note = m.note if m is not None else None
        if s is None:
            return ServedModel(listed.name, listed.status, listed.progress, listed.name == followed, note=note)
        warnings = sum(1 for a in s.alerts if a.level.rank >= AlertLevel.WARNING.rank)
        return ServedModel(
            listed.name, SLEEPING if s.connection.status.value == "sleeping" and listed.status == LOADED
            else listed.status, listed.progress, listed.name == followed,
            processing=any(sl.processing for sl in s.slots), decode_tok_s=s.decode_tok_s,
            context_tokens=s.context_tokens, n_ctx=s.model.n_ctx, n_slots=s.model.n_slots,
            kv_allocated_bytes=s.kv_allocated_bytes, kv_in_use_bytes=s.kv_in_use_bytes,
            weight_bytes=s.model.weight_bytes, alerts=warnings, note=note)

    def _message(self, followed: str | None, running: dict[str, ListedModel], listing: ModelListing) -> str | None:
        if followed is None:
            return state_message(listing.kind, listing.models)
        listed = running.get(followed)
        if listed is not None and listed.status in (LOADING, SLEEPING, UNLOADING):
            return f"{followed} {status_word(listed)}" + (" (idle; unloaded until the next request)"
                                                          if listed.status == SLEEPING else "")
        return None

    def close(self) -> None:
        """Close every model's source, the list source, the devices and the recorder (best effort)."""
        for name in list(self._models):
            self._drop(name)
        close_quietly(self.source, self.devices, self.recorder, self.curves)

    def __enter__(self) -> GroupMonitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
