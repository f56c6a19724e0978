"""The analysis step: one poll's readings → one Snapshot, by the parts of ``kvmon.core.analysis`` in order.

The Analyzer holds what lasts between polls (the counter rates, the free-VRAM trend, the
forecast's points and fit, the alert state, the connection's history) and calls the parts, each with one job:
the model view, the speeds and depth, the GPU views and placement, the ceiling, the VRAM split, the forecast,
the advice and the alert facts. It does no I/O.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kvmon.core.alerts import AlertEngine
from kvmon.core.analysis import (
    advice,
    alert_facts,
    causes,
    ceiling,
    consistency,
    devices,
    draft,
    energy,
    gpu_views,
    placement,
    regimes,
    speculation,
    speeds,
)
from kvmon.core.analysis.energy import EnergyMeter
from kvmon.core.analysis.forecasting import Forecaster
from kvmon.core.analysis.latency import LatencyTracker
from kvmon.core.analysis.model_view import cache_bytes, model_view
from kvmon.core.analysis.notes import Notes
from kvmon.core.analysis.prompt_cache import PromptCacheTracker
from kvmon.core.analysis.settings import AnalyzerSettings
from kvmon.core.analysis.vram_trend import SwapTrend, VramTrend
from kvmon.core.bounds import plausible_reading
from kvmon.core.connection import failure_snapshot, reading_status
from kvmon.core.curve_config import AtlasView, CurveMemory
from kvmon.core.curve_identity import config_of
from kvmon.core.device_names import canonical_device, is_device_buffer
from kvmon.core.locality import server_here
from kvmon.core.points import measured_point, model_key
from kvmon.core.rates import ENDED_REPLIES, SlotRateTracker
from kvmon.core.readings import FailureKind, GpuSetReading, HostReading, Provenance, ServerReading, SourceFailure
from kvmon.core.snapshot import Activity, Connection, ConnectionStatus, Snapshot
from kvmon.core.verdict import UNSEEN, DecodeMemory, before_what, decided
from kvmon.physics.attention_prior import attention_class

# the alerts that stand on where the model lives: withdrawn when a measured speed refutes the guess
PLACEMENT_ALERTS = frozenset({"cpu_only", "kv_in_host", "weights_in_host", "swap_growing", "unified_working_set"})


class Analyzer:
    """Turns each poll's readings into a Snapshot; keep one per monitored server."""

    def __init__(self, settings: AnalyzerSettings | None = None, *, rate_tracker: Any = None,
                 alert_engine: AlertEngine | None = None, clock: Callable[[], float] = time.monotonic,
                 settings_source: Callable[[], AnalyzerSettings | None] | None = None,
                 curve_memory: CurveMemory | None = None) -> None:
        """``settings_source``: asked before every poll for the settings the user has now (the dashboard's dialog
        changes bandwidths while polling goes on); its None keeps the settings as they are. ``curve_memory``: the
        atlas of measured curves (earlier points of the same configuration join the forecast's data, and decode
        slower than they say at this depth is a cause of the gap)."""
        self.settings = settings or AnalyzerSettings()
        self._settings_source = settings_source
        self._clock = clock  # for failures that come with no reading to take a time from
        self._rates = rate_tracker if rate_tracker is not None else SlotRateTracker()
        self.alerts = alert_engine or AlertEngine(self.settings.thresholds)
        self._curve_memory = curve_memory
        self._start()

    def _start(self) -> None:
        """A session's own state, afresh: trends, the forecast's points and fit, the connection's history."""
        self._trend = VramTrend(self.settings.thresholds)
        self._swap = SwapTrend(self.settings.thresholds)
        self._forecaster = Forecaster(self.settings.milestones, self.settings.max_fit_points,
                                      self.settings.curve_points, self._curve_memory)
        self._seq = 0
        self._last_ok: Snapshot | None = None  # its model and server stay on screen while the server is down
        self._failure_since: float | None = None
        self._connected_since: float | None = None
        self._reload_seen = False  # the server was loading (or its process changed) since the last reading
        self._server_pids: tuple[int, ...] = ()
        self._energy = EnergyMeter()
        self._latency = LatencyTracker()
        self._last_t: float | None = None  # the last analysed poll's instant (the energy interval's start)
        self._decodes = DecodeMemory()  # the last speed measured (the headline's while idle), the one before a reload
        self._unseen: tuple[Any, str] | None = None  # (model, why): its speed says it runs on a device not seen
        self._speeds = causes.SessionSpeeds()  # this session's measured points per configuration
        self._prompts = PromptCacheTracker(self.settings.thresholds)  # prompts read again and reused

    # ------------------------------------------------------------------ public

    def update(self, server: ServerReading | SourceFailure, gpus: GpuSetReading | None = None,
               host: HostReading | None = None) -> Snapshot:
        """Analyse one poll. A SourceFailure gives a Snapshot with that connection state and no speeds."""
        self._seq += 1
        if self._settings_source is not None:
            self.settings = self._settings_source() or self.settings
        if isinstance(server, SourceFailure):
            self._reload_seen = self._reload_seen or server.kind is FailureKind.MODEL_LOADING
            if server.kind is FailureKind.MODEL_LOADING:
                self._prompts.restarted()
            return self._failure(server, gpus, host)
        self._failure_since = None
        if self._connected_since is None:
            self._connected_since = server.t_monotonic
        try:
            snap = self._analyse(server, gpus, host)
        except Exception as exc:  # a physics bug must not kill the dashboard
            snap = self._degraded(server, gpus, f"analysis failed: {type(exc).__name__}: {exc}")
        self._last_ok = snap
        return snap

    def reset(self) -> None:
        """Forget the session (new server): rates, fit points, trends, alerts; the settings and parts stay."""
        if hasattr(self._rates, "reset"):
            self._rates.reset()
        self.alerts.reset()
        self._start()

    # ------------------------------------------------------------------ failures

    def _failure(self, failure: SourceFailure, gpus: GpuSetReading | None, host: HostReading | None) -> Snapshot:
        t = gpus.t_monotonic if gpus is not None else host.t_monotonic if host is not None else self._clock()
        if self._failure_since is None:
            self._failure_since = t
        self._connected_since = None
        gviews, greason, hview = gpu_views.machine_views(gpus, host, self.settings)
        self._trend.track(t, gpus)
        facts = alert_facts.failure_facts(failure, t, self._last_ok, self._trend.facts(gviews))
        return failure_snapshot(failure, seq=self._seq, t_monotonic=t, t_wall=time.time(),
                                since_t_monotonic=self._failure_since, last=self._last_ok, gpus=gviews,
                                gpus_unavailable_reason=greason, host=hview, alerts=self.alerts.update(facts))

    def _degraded(self, r: ServerReading, gpus: GpuSetReading | None, why: str) -> Snapshot:
        gviews, greason = gpu_views.gpu_views(gpus, self.settings.gpu_bandwidth_bytes_per_s)
        return decided(Snapshot(
            seq=self._seq, t_monotonic=r.t_monotonic, t_wall=r.t_wall,
            connection=Connection(ConnectionStatus.CONNECTED, reason=why), activity=Activity.UNKNOWN, backend=r.backend,
            server_version=r.server_version, url=r.url, gpus=gviews, gpus_unavailable_reason=greason,
            reasons={"analysis": why},
        ))

    # ------------------------------------------------------------------ one poll

    def _analyse(self, r: ServerReading, gpus: GpuSetReading | None, host: HostReading | None) -> Snapshot:
        r = plausible_reading(r)  # a value past its physical bound is unknown (with its reason), never a fact
        st, t = self.settings, r.t_monotonic
        # each step returns what it decided and its notes (where each number came from, why one is unknown)
        model, shape, model_notes = model_view(r)
        drafter, n1 = draft.draft_context(r)  # speculative decoding's draft context
        model, n2 = draft.with_draft(model, drafter, r)
        type_k, type_v = model.kv_type_k or "f16", model.kv_type_v or "f16"
        rates, n3 = speeds.speeds(self._rates.update(r), r)
        where, n4 = speeds.depth(r, rates.per_slot)
        kv_in_use, kv_read_now, n5 = speeds.kv_now(r, shape, where.context, type_k, type_v)
        notes = model_notes.then(n1, n2, n3, n4, n5)
        latency, n_latency = self._latency.update(r, drafting=drafter is not None)
        # the last speed measured: this poll's, else that of a reply that ended since the last poll, as the server
        # timed it (replies shorter than a poll are measured so, and the headline keeps their speed)
        ended = self._latency.added
        replied = 1.0 / ended.itl_s if ended is not None and ended.itl_s else None
        measured = rates.decode if rates.decode is not None else replied

        # the devices (read ones, then the ones only the log names), where the model lives, and the devices the
        # ceiling sums time over
        gviews, greason = gpu_views.gpu_views(gpus, st.gpu_bandwidth_bytes_per_s)
        self._trend.track(t, gpus)
        placeholder = not gviews and bool(r.weight_bytes_vram) and not devices.log_names(r.config)
        devs = devices.assemble(gviews, gpus, r.config, st, greason, gpu_placeholder=placeholder)
        host_bw, host_src = gpu_views.host_bandwidth(st.host_bandwidth_bytes_per_s, host)
        gviews = gpu_views.with_host_bandwidth(devs.views, host_bw, host_src)
        devs = devices.Devices(gviews, devs.by_name)
        no_gpu_here = gpus is not None and not gviews and server_here(r.url, r.server_pids)
        unseen = self._unseen_device(r, model, measured, host_bw) if no_gpu_here else None
        place = placement.place_draft(placement.place(r, model.weight_bytes, devs, gpu_views.server_used(gpus),
                                                      no_gpu_here=no_gpu_here and unseen is None), r, devs)
        if unseen is not None:  # nothing is built on the CPU guess: where it lives and the ceiling are unknown
            place = replace(place, source=UNSEEN, note=unseen)
        if place.note:
            notes = notes.then(Notes(reasons={"placement": place.note}))
        kv_why = consistency.kv_contradiction(model, place.kv_gpu, place.kv_host, gviews, host)
        if kv_why is not None:  # a cache larger than where it is said to live is not a size to draw
            model, n = consistency.without_kv(model, kv_why)
            notes = notes.then(n)
        cache = cache_bytes(model)  # the KV cache and a hybrid's recurrent state beside it
        place = placement.estimate_pcie_spill(place, gviews, cache, r.config.compute_buffer_bytes_by_device,
                                              devs, draft.draft_bytes(model), host.ram_total_bytes if host else None)
        devices_now, dev_reason = placement.devices(place, model.weight_bytes_read_per_token, gviews, host_bw)

        # what the speed depends on: another model, n_ctx, cache types, slots, devices or placement (or a reload)
        # begins a new regime, and the forecast's measurements start again
        self._observe_regime(r, model, type_k, type_v, devices_now)
        ceiling_now, curve, n1 = ceiling.ceiling(devices_now, dev_reason, shape, model, kv_read_now, type_k, type_v,
                                                 st.curve_points, model_notes.reasons.get("kv_bytes_per_token"))
        # speculative decoding: each target step yields the tokens it accepts too, so the bus allows that many more
        read_now = placement.weights_read(place, model.weight_bytes_read_per_token)
        target_now = (read_now or 0) + (kv_read_now or 0) or None
        spec, n2 = speculation.speculation(r)
        spec, ceiling_now, curve, n3 = speculation.lifted(spec, ceiling_now, curve, draft=drafter,
                                                          context_tokens=where.context, target_bytes_now=target_now)
        notes = notes.then(n1, Notes(reasons={"ceiling_tok_s": unseen} if unseen is not None else {}), n2, n3)
        if ceiling_now is None and speeds.pooled_tokens(r) is not None:  # several requests share one KV pool
            ceiling_now, n = ceiling.batch_ceiling(devices_now, kv_in_use, r.requests_running)
            notes = notes.then(n)
        # measured above what the bus allows: one of the ceiling's inputs is wrong; a finding, not a percentage
        efficiency, suspect, n1 = consistency.efficiency(rates.decode, ceiling_now, devices_now, place, gviews, model,
                                                         model_notes.provenance)
        if efficiency is not None or suspect is not None:
            self._forecaster.add_efficiency(efficiency if efficiency is not None else 1.0)
        bw, n2 = ceiling.bandwidth(rates.decode, read_now, kv_read_now, ceiling_now)
        compute_by_index = {i: b for d, b in r.config.compute_buffer_bytes_by_device.items()
                            if is_device_buffer(d) and (i := devs.by_name.get(canonical_device(d))) is not None}
        gviews = gpu_views.split_vram(gviews, place, model, cache, kv_in_use, rates.decode, kv_read_now,
                                      compute_by_index, gpus)
        gviews, n3 = consistency.vram_split(gviews, compute_by_index)  # the parts the measured memory denies
        notes = notes.then(n1, n2, n3)
        shares = ceiling.step_shares(devices_now, kv_read_now) if len(devices_now or ()) > 1 else {}
        if shares:  # layers split over devices: each reads its part in turn, at its own rate for its share
            gviews = tuple(replace(g, step_share=shares.get(f"GPU {g.index}")) for g in gviews)
        # host RAM, and the host prompt cache llama-server keeps there (--cache-ram, 8 GiB by default)
        hview = gpu_views.host_view(host, place, cache, host_bw=host_bw, host_bw_source=host_src,
                                    model=model, decode=rates.decode, kv_read_now=kv_read_now, gviews=gviews,
                                    prompt_cache_limit_bytes=r.config.prompt_cache_limit_bytes)
        if shares.get("host") is not None:
            hview = replace(hview, step_share=shares["host"])
        if r.config.prompt_cache_limit_bytes is not None:
            cp = r.config.provenance.get("prompt_cache_limit_bytes", Provenance.DEFAULT)
            notes = notes.then(Notes({"prompt_cache_limit_bytes": cp}))

        # what follows from the session so far: this poll's point joins the fit's store, then the forecast
        self._forecaster.add(r, model, where.slots, where.context, rates.decode, rates.decode_rate_source)
        atlas = self._forecaster.remembered(config_of(r.backend, r.server_version, model, gviews, hview))
        vfacts = self._trend.facts(gviews)
        fc, n1 = self._forecaster.forecast(t, model, where.context, rates.decode, devices_now, shape, type_k, type_v,
                                           vfacts, vendors=[g.vendor for g in gviews])
        fc, n2 = consistency.forecast_under(fc, suspect)
        fc, n3 = speculation.withheld(fc, spec)
        cheaper = advice.cache_advice(r, model, shape, devices_now, ceiling_now, rates.decode, where.context,
                                      advice_types=st.advice_types,
                                      median_efficiency=self._forecaster.median_efficiency())
        slot_id = where.deepest.id if where.deepest and len(r.slots) > 1 else None
        dfacts = alert_facts.DeviceFacts(
            gviews=gviews, host=hview, cache_bytes=cache, draft_bytes=draft.draft_bytes(model),
            compute_by_index=compute_by_index,
            swap_growth_bytes=self._swap.track(t, host.swap_used_bytes if host else None),
            log_hint=r.reasons.get("log_placement"))
        prompts = self._prompts.update(r, where.context)
        point = measured_point(where.slots, where.context, rates.decode, rates.decode_rate_source)
        last_decode, before = self._decodes.update(model_key(r.url, model), fc.regime.index or None, measured, t,
                                                   r.t_wall, where.context, point[1] if point is not None else None)
        gap = self._gap(r, model, shape, where.context, rates.decode, ceiling_now if efficiency is not None else None,
                        devices_now, kv_read_now, read_now, place, gviews, hview, spec, t, point, atlas)
        facts = alert_facts.reading_facts(r, t, model, where.context, slot_id, rates.decode, fc, vfacts, place,
                                          ceiling_now, cheaper, dfacts, advice_types=st.advice_types, latency=latency,
                                          prompt_cache=prompts)
        if unseen is not None:  # the CPU guess an earlier poll made: nothing stands on it any more
            facts = replace(facts, withdrawn=PLACEMENT_ALERTS)
        if before is not None and before_what(fc.regime.cause) is not None:
            facts = replace(facts, decode_before_tok_s=before.tok_s, decode_before_what=before_what(fc.regime.cause))
        status = reading_status(r.state)
        dt, self._last_t = (t - self._last_t if self._last_t is not None else None), t
        # energy per token counts intervals of decoding at the speed measured over them: replies that ended in an
        # interval were timed over their generation only (the interval also held prompts), so it is no such interval
        decoded = rates.decode if rates.decode_rate_source != ENDED_REPLIES else None
        counted, n5 = energy.counted_devices(gpus, host, gviews, hview)
        used, n6 = self._energy.update(t, counted, decoded, dt, busy=speeds.busy(r, rates.decode, rates.prefill),
                                       reply=self._latency.added)
        notes = notes.then(n1, n2, n3, n_latency, n5, n6)
        return decided(Snapshot(
            seq=self._seq, t_monotonic=t, t_wall=r.t_wall,
            connection=Connection(status=status, since_t_monotonic=self._connected_since),
            backend=r.backend, server_version=r.server_version, url=r.url, model=model, slots=where.slots,
            context_tokens=where.context, decode_tok_s=rates.decode, activity=speeds.activity(rates, status),
            prefill_tok_s=rates.prefill, decode_rate_source=rates.decode_rate_source,
            ceiling_tok_s=ceiling_now, ceiling_curve=curve, efficiency=efficiency, ceiling_suspect=suspect,
            kv_in_use_bytes=kv_in_use, kv_allocated_bytes=model.kv_allocated_bytes,
            bytes_read_per_token=bw.bytes_per_token, achieved_bandwidth_bytes_per_s=bw.achieved,
            peak_bandwidth_bytes_per_s=bw.peak, bandwidth_headroom_fraction=bw.headroom, gpus=gviews,
            gpus_unavailable_reason=greason, host=hview,
            forecast=fc, alerts=self.alerts.update(facts), provenance=notes.provenance, reasons=notes.reasons,
            extra={"placement": place.source}, speculative=spec, energy=used, latency=latency,
            last_decode=last_decode, decode_before=before, slowdown_causes=gap, prompt_cache=prompts, atlas=atlas,
        ))

    def _gap(self, r: ServerReading, model: Any, shape: Any, context: int | None, decode: float | None,
             ceiling_now: float | None, devices_now: list[Any] | None, kv_read_now: float | None,
             read_now: float | None, place: placement.Placement, gviews: tuple[Any, ...], hview: Any, spec: Any,
             t: float, point: tuple[float, float] | None, atlas: AtlasView | None) -> tuple[Any, ...]:
        """Why decode runs below the ceiling now (``kvmon.core.analysis.causes``), against this session's earlier
        points and the atlas's of the configuration; this poll's point is remembered after it is compared."""
        config = causes.config_key(model_key(r.url, model), model.n_ctx, model.kv_type_k, model.kv_type_v,
                                   model.n_slots, devices_now)
        # the atlas files a curve by its configuration: a KV cache the driver spilled over PCIe is not on its curve
        spilled = any(v > 0 for v in place.kv_pcie.values())
        curves = causes.AtlasSpeeds(None if spilled else atlas, t, r.t_wall)
        earlier = causes.earlier_speed((self._speeds, curves), config, context, t)
        if point is not None and config is not None:
            self._speeds.add(config, int(point[0]), point[1], t)
        kv_share = (kv_read_now / (read_now + kv_read_now) if kv_read_now is not None and read_now is not None
                    and read_now + kv_read_now > 0 else None)
        on_host = place.kv_host > 0 or (place.weights_host_read > 0 and not place.on_device)
        req = r.last_request
        client = (causes.ClientView(req.client_tok_s, req.predicted_tokens / req.predicted_seconds)
                  if req is not None and req.client_tok_s and req.predicted_tokens and req.predicted_seconds else None)
        return causes.breakdown(causes.GapInputs(
            decode_tok_s=decode, ceiling_tok_s=ceiling_now, context_tokens=context, gpus=gviews, host=hview,
            step_shares=ceiling.step_shares(devices_now, kv_read_now), kv_share=kv_share,
            attention_class=attention_class(shape, on_host) if shape is not None else None,
            n_threads=r.config.n_threads, speculative=spec,
            target_bytes_per_token=(read_now or 0) + (kv_read_now or 0) or None, earlier=earlier, client=client))

    def _unseen_device(self, r: ServerReading, model: Any, decode: float | None, host_bw: float | None) -> str | None:
        """Why the model runs on a device kvmon cannot see (kept for the model once its speed said so), or None."""
        key = model_key(r.url, model)
        if self._unseen is not None and self._unseen[0] != key:
            self._unseen = None
        if self._unseen is None:
            why = consistency.unseen_device(decode, host_bw, model.weight_bytes_read_per_token)
            if why is not None:
                self._unseen = (key, why)
        return self._unseen[1] if self._unseen is not None else None

    def _observe_regime(self, r: ServerReading, model: Any, type_k: str | None, type_v: str | None,
                        shares: list[Any] | None) -> None:
        """This poll's regime key, and whether the server reloaded (was loading, or its process changed) since."""
        if r.state == "loading":
            self._reload_seen = True
            self._prompts.restarted()
            return
        pids = tuple(sorted(r.server_pids))
        reloaded = self._reload_seen or bool(pids and self._server_pids and pids != self._server_pids)
        if reloaded:
            self._prompts.restarted()
        self._server_pids = pids or self._server_pids
        self._reload_seen = False
        key = regimes.regime_key(model_key(r.url, model), model.n_ctx, model.kv_type_k and type_k,
                                 model.kv_type_v and type_v, model.n_slots, shares)
        self._forecaster.observe(key, reloaded=reloaded, t_monotonic=r.t_monotonic, t_wall=r.t_wall)
