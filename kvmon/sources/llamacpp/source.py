"""llama-server source: /health, /props, /slots, /metrics and /v1/models into one ``ServerReading``.

One poll of one server is one piece of work (what /props says decides whether /slots and /metrics are asked, and
which model file is read), so it stays in one module; the answers are parsed in ``kvmon.sources.llamacpp.parse``,
the local process is read in ``kvmon.sources.llamacpp.process``, the settings are layered in
``kvmon.sources.config`` and the model described in ``kvmon.sources.llamacpp.model``.

Accepts every known response shape (``state`` int or ``is_processing``; ``next_token`` object or
one-element array; with or without the ``n_prompt_tokens*`` fields and ``endpoint_*`` flags). Reads
/metrics only when /props says it is on (older builds: tries once and remembers a 501), keeps counters
only (never the reset-on-scrape gauges), skips /slots while the server sleeps, and learns what no
endpoint shows from the local process (argv/environment), the server's log, and user settings.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from kvmon.core.jsonvals import json_int, json_str
from kvmon.core.readings import (
    FailureKind,
    RateSource,
    ServerConfig,
    ServerReading,
    SlotReading,
    SourceError,
    SourceFailure,
)
from kvmon.core.sanitize import plain_text
from kvmon.sources.answers import PollAnswers
from kvmon.sources.config import merge_configs, user_config
from kvmon.sources.http import HttpClient, decode_json, normalize_base_url, raise_for_status
from kvmon.sources.llamacpp import LLAMA_SERVER
from kvmon.sources.llamacpp.args import DEFAULT_PORT, parse_llama_server_args
from kvmon.sources.llamacpp.draft import with_draft
from kvmon.sources.llamacpp.log import LogFollower
from kvmon.sources.llamacpp.model import ModelDescriber
from kvmon.sources.llamacpp.parse import (
    REQUESTS_PROCESSING,
    MetricsTextError,
    derive_totals,
    metrics_key,
    parse_metrics,
    parse_slot,
)
from kvmon.sources.llamacpp.process import LlamaServerProcess
from kvmon.sources.llamacpp.sleep import SleepCourtesy
from kvmon.sources.procs import is_local_host
from kvmon.sources.proxy_reader import ProxyReader

BACKEND = LLAMA_SERVER
HEALTH_EVERY_POLLS = 10  # /props answers the rest of the time: one request less per poll
# While a slot generates, the server is awake and its model fixed: the last /props answer stands for up to this
# many polls. While no slot starts, ends or begins decoding, the counters kvmon reads cannot move: the last /metrics
# answer stands as long (see kvmon.sources.llamacpp.parse.metrics_key).
REUSE_MAX_POLLS = 10
DEFAULT_PROXY_URL = "http://127.0.0.1:11435"  # where `kvmon proxy` listens unless told otherwise
# /slots (like /metrics) is a task on llama-server's queue, and every task restarts the idle timer that
# --sleep-idle-seconds counts: within this long of the last /slots answer the server cannot have fallen asleep
# (for any sleep setting of 2 s or more), so the next poll need not ask /props first to avoid waking it.
SLOTS_KEEP_AWAKE_S = 2.0



@functools.cache
def _default_config() -> ServerConfig:
    """llama-server's defaults, the bottom config layer; "-np auto ⇒ unified" and idle sleep are left unknown:
    without the argv they are guesses, so the log, the user or the slot count decide."""
    return dataclasses.replace(parse_llama_server_args([]).config, kv_unified=None, sleep_idle_seconds=None)


class LlamaServerSource:
    """Polls one llama-server; ``poll()`` returns a ServerReading or raises SourceError (typed)."""

    backend = BACKEND

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 3.0,
        log_path: str | None = None,
        config_override: ServerConfig | None = None,
        model_metadata_override: Mapping[str, Any] | None = None,
        inspect_local_process: bool = True,
        clock: Callable[[], float] = time.monotonic,
        local_files: bool | None = None,
        model_id: str | None = None,
        process_port: int | None = None,
        command_line: Sequence[str] | None = None,
        model_name: str | None = None,
        proxy_url: str | None = None,
    ) -> None:
        """``model_id``: one model of a router (every per-model endpoint is asked with ``?model=<id>&autoload=false``,
        so watching it never loads it). ``process_port``: where the model's own server process listens (a router's
        child), for its argv, environment and pids on this machine. ``command_line``: the server's argv as another
        process reports it (the router's ``/models`` args, llama-swap's ``cmd``), used when the process itself cannot
        be read. ``model_name``: the name the user gave the model elsewhere (a llama-swap entry's), shown as an
        alias is. ``local_files``: whether the paths the server names (its model file) are files on
        this machine; by default, when the server's host is this machine. A remote server's paths are never opened
        here. ``proxy_url``: the ``kvmon proxy`` in front of it (default: the proxy's default address, read when it
        forwards here): each reply's timings and what made a conversation's prompt change."""
        self.base_url = normalize_base_url(base_url)
        self._clock = clock  # timestamps readings; a simulator's clock makes rates come out in its time
        self._api_key = api_key
        self._http = HttpClient(self.base_url, api_key=api_key, timeout_s=timeout_s)
        self.display_url = self._http.display_url
        parts = urlsplit(self.base_url)
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._config_override = user_config(config_override)
        self._log = LogFollower(log_path) if log_path else None
        self._last_failure_kind: FailureKind | None = None
        self._metrics_unsupported = False  # remembered 501 on a build without the endpoint flag
        self._health_due = True  # /health on the first poll, after a failed one and every HEALTH_EVERY_POLLS
        self._polls_since_health = 0
        self._props_memo: tuple[Mapping[str, Any], str, int] | None = None  # (props, router query, polls reused)
        self._busy = False  # a slot was generating at the last poll
        self._never_sleeps = False  # the server's command line (or the user) says it never unloads when idle
        self._slots_answered_at: float | None = None  # clock time of the last /slots answer (a task: keeps it awake)
        self._metrics_memo: tuple[tuple[Any, ...], dict[str, float], int] | None = None  # (key, counters, uses)
        self._process = LlamaServerProcess(self._host, process_port or self._port, inspect=inspect_local_process)
        self._sleep = SleepCourtesy()  # skips /slots while idle, so a server that may sleep when idle can fall asleep
        self._quiet_slots: tuple[SlotReading, ...] = ()  # the last /slots answer, standing while it is not asked
        self.model_id = model_id
        self._failed_polls = 0
        self._answers = PollAnswers()  # this poll's usable answers and failures
        self._model_query = f"?model={quote(model_id, safe='')}&autoload=false" if model_id else ""
        self._argv_config = parse_llama_server_args(list(command_line)[1:]).config if command_line else None
        self._local_files = is_local_host(self._host) if local_files is None else local_files
        # a router's or llama-swap's name for the model is the user's
        self._model = ModelDescriber(self._optional_json, self._process, local_files=self._local_files,
                                     model_override=model_metadata_override, model_name=model_name or model_id)
        # a router's model is reached through the router, not through a proxy of its own
        self._proxy = None if model_id else ProxyReader(proxy_url, DEFAULT_PROXY_URL, self.base_url, DEFAULT_PORT)

    def __repr__(self) -> str:
        return f"LlamaServerSource({self.display_url!r})"

    def request_key(self) -> str | None:
        """The API key this source sends (a depth sweep of the same server sends it too)."""
        return self._api_key

    def close(self) -> None:
        """Close the HTTP connection pools."""
        self._http.close()
        if self._proxy is not None:
            self._proxy.close()

    # ---- HTTP helpers -------------------------------------------------------------------------

    def _optional_json(self, path: str, reasons: dict[str, str], key: str) -> Any:
        """GET JSON; auth/loading failures abort the poll, anything else becomes a reason and None. An object or a
        list is a usable answer of this poll (``kvmon.sources.answers``)."""
        try:
            body = self._http.get_json(path)
        except SourceError as e:
            if e.failure.kind in (FailureKind.AUTH_REJECTED, FailureKind.MODEL_LOADING):
                raise
            reasons[key] = e.failure.reason
            self._last_failure_kind = e.failure.kind
            self._answers.failed(e.failure)
            return None
        if isinstance(body, (Mapping, list)):
            self._answers.ok()
        else:
            self._answers.failed(SourceFailure(FailureKind.UNEXPECTED_BODY, f"{path.split('?', 1)[0]} did not "
                                               "return an object or a list", path.split("?", 1)[0]))
        return body

    # ---- poll ---------------------------------------------------------------------------------

    def poll(self) -> ServerReading:
        """Read every endpoint once and combine them; raises SourceError when the server cannot be read: it does
        not answer, or every endpoint asked failed (``kvmon.sources.answers``)."""
        self._answers = PollAnswers()
        try:
            reading = self._poll()
            self._answers.check()
            return reading
        except SourceError:
            self._failed_polls += 1  # the server may come back as another start of it: its files are read again
            raise

    def _server_start(self) -> tuple[tuple[int, float] | None, int]:
        """Which start of the server this is, as far as can be told: its process here (pid, start time) and the
        failed polls so far (a restart, a reload or a server gone between polls)."""
        return self._process.identity(), self._failed_polls

    def _poll(self) -> ServerReading:
        t_mono, t_wall = self._clock(), time.time()
        reasons: dict[str, str] = {}
        # /health answers what /props also shows (loading, key rejected, gone); ask it on the first poll, after a
        # failed one and every HEALTH_EVERY_POLLS polls (older builds say "loading" only there), not every time
        checked, self._health_due = self._health_due, True  # a poll that raises leaves it due
        memo, self._props_memo = self._props_memo, None  # a poll that raises reads /props again
        if checked and not self._model_query:  # a router's /health speaks for the router, not for one model
            checked = self._check_health(reasons)
        # /props is asked before /slots while the server could be asleep (asking /slots would wake it)
        slots_lately = self._slots_answered_at is not None and t_mono - self._slots_answered_at < SLOTS_KEEP_AWAKE_S
        awake = self._busy or self._never_sleeps or slots_lately
        if memo is not None and awake and not checked and memo[2] < REUSE_MAX_POLLS:
            props, q, times = memo
            next_memo: tuple[Mapping[str, Any], str, int] | None = (props, q, times + 1)
        else:
            read, q = self._read_props(reasons)
            if read is None:
                return ServerReading(t_monotonic=t_mono, t_wall=t_wall, backend=BACKEND, url=self.display_url,
                                     state="idle", reasons=reasons)
            props = read
            next_memo = (props, q, 0) if "props" not in reasons else None
        reading = self._poll_after_props(props, q, reasons, checked, t_mono, t_wall)
        self._props_memo = next_memo
        return reading

    def _read_props(self, reasons: dict[str, str]) -> tuple[Mapping[str, Any] | None, str]:
        """/props (in router mode, the loaded model's, with the query it needs); None: router without a model."""
        if self._model_query:  # one model of a router: without its /props (not loaded, router gone) nothing is read
            props = self._optional_json("/props" + self._model_query, reasons, "props")
            if not isinstance(props, Mapping):
                why = reasons.pop("props", None) or "/props did not return an object"
                raise SourceError(SourceFailure(self._last_failure_kind or FailureKind.UNEXPECTED_BODY,
                                                f"model {self.model_id}: {why}", "/props"))
            return props, self._model_query
        # /props failing costs its own values only: whether the server answers at all, the poll's other requests
        # say (a server gone fails them all at once: ``PollAnswers.check``)
        props = self._optional_json("/props", reasons, "props")
        q = ""  # router mode (no -m): every per-model endpoint needs ?model=<id>
        if props is None and self._last_failure_kind in (FailureKind.SERVER_ERROR, FailureKind.NOT_FOUND):
            router, loaded = self._router_models()
            if router:
                reasons.pop("props", None)
                if loaded is None:
                    reasons["model"] = "router mode: no model is loaded"
                    return None, q
                q = "?model=" + quote(loaded, safe="")
                props = self._optional_json("/props" + q, reasons, "props")
        if props is not None and not isinstance(props, Mapping):
            reasons["props"] = "/props did not return an object"
            props = None
        if isinstance(props, Mapping) and props.get("role") == "router":
            raise SourceError(SourceFailure(FailureKind.UNEXPECTED_BODY, f"{self.display_url} is a llama-server "
                                            "router (no model of its own): open it as one", "/props"))
        return props or {}, q

    def _poll_after_props(self, props: Mapping[str, Any], q: str, reasons: dict[str, str], checked: bool,
                          t_mono: float, t_wall: float) -> ServerReading:
        """The rest of a poll once /props is known (read now, or reused while a slot generates)."""
        t_start = t_mono
        sleeping = props.get("is_sleeping") is True
        state = "sleeping" if sleeping else "ok"
        server_version = json_str(props.get("build_info"))

        slots: tuple[SlotReading, ...] = ()
        live_source: RateSource | None = None
        live_reason: str | None = None
        # idle on a server that sleeps when idle: /metrics (no task, no timer reset) says whether to ask /slots
        pre_metrics: tuple[bool | None, dict[str, float]] | None = None
        skip = False
        if not sleeping and props.get("endpoint_slots") is not False and self._sleep.may_skip(t_mono):
            pre_metrics = self._read_metrics(props, reasons, q, ())
            skip = self._sleep.skip_slots(t_mono, pre_metrics[1] if pre_metrics[0] else None, sleeping)
        waiting_idle = False
        if sleeping:
            live_reason = "server is sleeping (not polling /slots, which would wake it)"
        elif props.get("endpoint_slots") is False:
            live_reason = "the /slots endpoint is off on this server (--no-slots)"
        elif skip:
            live_reason = reasons["slots"] = self._sleep.reason()
            waiting_idle = True
            if self._sleep.watched_by_metrics:  # no request since the last /slots: those slots are still as read
                slots = self._quiet_slots
        else:
            t0 = self._clock()
            raw_slots = self._optional_json("/slots" + q, reasons, "slots")
            # the counters' instant: the middle of the /slots request, not the start of the poll
            t_mono = (t0 + self._clock()) / 2.0
            t_wall += t_mono - t_start
            if raw_slots is None:
                live_reason = reasons.get("slots")
            elif not isinstance(raw_slots, list):
                reasons["slots"] = live_reason = "/slots did not return a list"
            else:
                self._slots_answered_at = t0
                parsed = [parse_slot(s, reasons) for s in raw_slots]
                slots = tuple(s for s in parsed if s is not None)
                self._sleep.slots_read(t0, any(sl.processing for sl in slots))
                self._quiet_slots = slots
                if slots:
                    live_source = "slots"

        metrics_enabled, metrics = pre_metrics or self._read_metrics(props, reasons, q, slots)
        processing = metrics.get(REQUESTS_PROCESSING)  # a gauge among the counters: whether a request runs now
        if processing is not None:
            metrics = {k: v for k, v in metrics.items() if k != REQUESTS_PROCESSING}
        # where /slots answers, its slots say which requests run; else the server's own count of them
        requests_running = int(processing) if processing is not None and not slots else None
        self._busy = any(sl.processing for sl in slots)
        if live_source is None and not sleeping and "n_decode_total" in metrics:
            live_source = "metrics"  # one slot: n_decode_total stands in (see kvmon.core.rates)

        model, model_reasons = self._model.info(props, self.model_id or (unquote(q[len("?model="):]) if q else None),
                                                self._server_start())
        reasons.update(model_reasons)
        config, pids = self._config(reasons)
        model = with_draft(model, config, self._model.files, self._model.resolve, self._local_files, reasons,
                           start=self._server_start())
        self._never_sleeps = config.sleep_idle_seconds is not None and config.sleep_idle_seconds < 0
        self._sleep.sleep_s = config.sleep_idle_seconds

        total_slots = json_int(props.get("total_slots"))
        if total_slots is None and slots:
            total_slots = len(slots)
        config = derive_totals(config, props, slots, total_slots)

        if live_source is None and live_reason is None:
            live_reason = "no live counters (no /slots and no /metrics)"
        self._answers.check()  # every endpoint failed: a failure, and the answers reused next poll are forgotten
        proxy, proxy_reason = self._proxy.read(t_mono, t_wall) if self._proxy is not None else (None, None)
        if proxy_reason:
            reasons["proxy"] = proxy_reason
        self._polls_since_health = 0 if checked else self._polls_since_health + 1
        # a /health that failed (the rest answering) is asked again next poll: its reason stays on screen
        self._health_due = self._polls_since_health + 1 >= HEALTH_EVERY_POLLS or "health" in reasons
        return ServerReading(
            t_monotonic=t_mono,
            t_wall=t_wall,
            backend=BACKEND,
            url=self.display_url,
            server_version=server_version,
            state=state,
            model=model,
            slots=slots,
            total_slots=total_slots,
            kv_unified=config.kv_unified,
            metrics_enabled=metrics_enabled,
            metrics=metrics,
            requests_running=requests_running,
            config=config,
            live_rate_source=live_source,
            live_rate_unavailable_reason=None if live_source else live_reason,
            live_rate_idle=waiting_idle and not live_source,
            server_pids=pids,
            reasons=reasons,
            last_request=proxy.last if proxy is not None else None,
            prompt_changes=proxy.prompt_changes if proxy is not None else (),
        )

    def _check_health(self, reasons: dict[str, str]) -> bool:
        """/health: loading (503, or an older build's status text), a key refused and an error state end the poll;
        no answer, or an answer that is not /health's, is only a reason (then the other endpoints decide: False)."""
        try:
            resp = self._http.get("/health")
        except SourceError as e:
            if e.failure.kind in (FailureKind.AUTH_REJECTED, FailureKind.MODEL_LOADING):
                raise
            reasons["health"] = e.failure.reason
            self._answers.failed(e.failure)
            return False
        try:
            body = decode_json(resp, "/health")
        except SourceError:
            body = None
        status = body.get("status") if isinstance(body, Mapping) else None
        if isinstance(status, str):
            self._answers.ok()
        elif resp.status_code not in (401, 403, 503):
            try:
                raise_for_status(resp, "/health", self.display_url)
                decode_json(resp, "/health")
                failure = SourceFailure(FailureKind.UNEXPECTED_BODY, "/health did not say the server's status",
                                        "/health", resp.status_code)
            except SourceError as e:
                failure = e.failure
            self._answers.failed(failure)
        if isinstance(status, str) and "loading" in status.lower():
            raise SourceError(SourceFailure(FailureKind.MODEL_LOADING, f"{self.display_url} is loading the model",
                                            "/health", resp.status_code))
        if resp.status_code == 503 and isinstance(status, str) and "no slot" in status.lower():
            return True  # older builds: every slot busy, the server is fine
        if resp.status_code == 404:
            return True  # not all builds have it; the other endpoints decide
        if resp.status_code == 503 or resp.status_code in (401, 403):
            raise_for_status(resp, "/health", self.display_url)
        if isinstance(status, str) and status.lower() == "error":
            raise SourceError(SourceFailure(FailureKind.SERVER_ERROR, f"{self.display_url} reports an error state "
                                            "(model failed to load?)", "/health", resp.status_code))
        return True

    def _read_metrics(
        self, props: Mapping[str, Any], reasons: dict[str, str], q: str = "", slots: tuple[SlotReading, ...] = ()
    ) -> tuple[bool | None, dict[str, float]]:
        key = metrics_key(q, slots)
        memo, self._metrics_memo = self._metrics_memo, None
        if key is not None and memo is not None and memo[0] == key and memo[2] < REUSE_MAX_POLLS:
            self._metrics_memo = (key, memo[1], memo[2] + 1)
            return True, memo[1]
        enabled, metrics = self._fetch_metrics(props, reasons, q)
        if enabled and metrics and "metrics" not in reasons and key is not None:
            self._metrics_memo = (key, metrics, 0)
        return enabled, metrics

    def _fetch_metrics(self, props: Mapping[str, Any], reasons: dict[str, str], q: str) -> tuple[bool | None,
                                                                                                 dict[str, float]]:
        flag = props.get("endpoint_metrics")
        if flag is False:
            reasons["metrics"] = "/metrics is off on this server (start it with --metrics for more counters)"
            return False, {}
        if flag is not True and self._metrics_unsupported:
            reasons["metrics"] = "/metrics is not enabled on this server"
            return False, {}
        try:
            resp = self._http.get("/metrics" + q)
            raise_for_status(resp, "/metrics", self.display_url)
        except SourceError as e:
            if e.failure.kind == FailureKind.AUTH_REJECTED:
                raise
            if e.failure.kind == FailureKind.ENDPOINT_DISABLED:
                if flag is None:
                    self._metrics_unsupported = True
                reasons["metrics"] = "/metrics is not enabled on this server"
                return False, {}
            reasons["metrics"] = e.failure.reason
            self._answers.failed(e.failure)
            return flag if isinstance(flag, bool) else None, {}
        rejected: list[str] = []
        try:
            metrics = parse_metrics(resp.text, rejected)
        except MetricsTextError as e:
            reasons["metrics"] = f"/metrics text not understood ({plain_text(str(e)[:80])})"  # it may quote the page
            self._answers.failed(SourceFailure(FailureKind.UNEXPECTED_BODY, reasons["metrics"], "/metrics"))
            return True, {}
        if metrics:
            self._answers.ok()
        else:
            self._answers.failed(SourceFailure(FailureKind.UNEXPECTED_BODY, "/metrics has no llama-server counters",
                                               "/metrics", resp.status_code))
        if rejected:
            reasons["metrics"] = f"/metrics: {', '.join(rejected[:5])} not a count kvmon can use (left out)"
        return True, metrics

    # ---- model --------------------------------------------------------------------------------

    def _router_models(self) -> tuple[bool, str | None]:
        """(is router mode, the first loaded model id) from /v1/models entries that carry a ``status``."""
        body = self._optional_json("/v1/models", {}, "v1_models")
        data = body.get("data") if isinstance(body, Mapping) else None
        if not isinstance(data, list):
            return False, None
        entries = [e for e in data if isinstance(e, Mapping) and isinstance(e.get("status"), Mapping)]
        if not entries:
            return False, None
        for e in entries:
            if e["status"].get("value") == "loaded" and json_str(e.get("id")):
                return True, json_str(e.get("id"))
        return True, None

    # ---- config -------------------------------------------------------------------------------

    def _config(self, reasons: dict[str, str]) -> tuple[ServerConfig, tuple[int, ...]]:
        """Defaults < local process argv/environment < log file < user settings, field by field."""
        layers: list[ServerConfig | None] = [_default_config()]
        proc_config, pids, proc_reasons = self._process.config()
        if proc_config is None and self._argv_config is not None:
            proc_config = self._argv_config  # the command line the router or llama-swap reports for this server
            proc_reasons = {k: v for k, v in proc_reasons.items() if k != "config.process"}
        layers.append(proc_config)
        reasons.update(proc_reasons)
        if self._log is not None:
            layers.append(self._log.poll())
            if self._log.error:
                reasons["config.log"] = self._log.error
            hint = self._log.placement_hint()
            if hint:
                reasons["log_placement"] = hint
        layers.append(self._config_override)
        return merge_configs(*layers), pids
