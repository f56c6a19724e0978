"""llama-server source: /health, /props, /slots, /metrics and /v1/models into one ``ServerReading``.

Accepts every known response shape (``state`` int or ``is_processing``; ``next_token`` object or
one-element array; with or without the ``n_prompt_tokens*`` fields and ``endpoint_*`` flags). Reads
/metrics only when /props says it is on (older builds: tries once and remembers a 501), keeps counters
only (never the reset-on-scrape gauges), skips /slots while the server sleeps, and learns what no
endpoint shows from the local process (argv/environment), the server's log, and user settings.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import psutil

from kvmon.core.jsonvals import json_int, json_str
from kvmon.core.readings import (
    FailureKind,
    ModelInfo,
    Provenance,
    ServerConfig,
    ServerReading,
    SlotReading,
    SourceError,
    SourceFailure,
)
from kvmon.sources import procs
from kvmon.sources.config import merge_configs, user_config
from kvmon.sources.http import HttpClient, decode_json, normalize_base_url, raise_for_status
from kvmon.sources.llama_args import parse_llama_server_args
from kvmon.sources.llama_log import LogFollower
from kvmon.sources.model_file import ModelFiles

BACKEND = "llama-server"
METRIC_PREFIX = "llamacpp:"
PROCESS_RECHECK_S = 30.0
PROCESS_ALIVE_CHECK_S = 5.0  # how often the known server process is checked to be still the same one
HEALTH_EVERY_POLLS = 10  # /props answers the rest of the time: one request less per poll
# While a slot generates, the server is awake and its model fixed: the last /props answer stands for up to this
# many polls. While no slot starts, ends or begins decoding, the counters kvmon reads cannot move: the last /metrics
# answer stands as long (see _metrics_key).
REUSE_MAX_POLLS = 10
# /slots (like /metrics) is a task on llama-server's queue, and every task restarts the idle timer that
# --sleep-idle-seconds counts: within this long of the last /slots answer the server cannot have fallen asleep
# (for any sleep setting of 2 s or more), so the next poll need not ask /props first to avoid waking it.
SLOTS_KEEP_AWAKE_S = 2.0



@functools.cache
def _default_config() -> ServerConfig:
    """llama-server's defaults, the bottom config layer; "-np auto ⇒ unified" and idle sleep are left unknown:
    without the argv they are guesses, so the log, the user or the slot count decide."""
    return dataclasses.replace(parse_llama_server_args([]).config, kv_unified=None, sleep_idle_seconds=None)


def parse_metrics(text: str) -> dict[str, float]:
    """Counters from llama-server's Prometheus text, without the ``llamacpp:`` prefix; gauges are dropped."""
    from prometheus_client.parser import text_string_to_metric_families  # only needed once /metrics answers

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.type != "counter":
            continue
        for sample in family.samples:
            if sample.labels:
                continue
            name = sample.name
            if name.startswith(METRIC_PREFIX):
                name = name[len(METRIC_PREFIX) :]
            if name.endswith("_created"):
                continue
            if name.endswith("_total") and sample.name not in text:  # parser added the suffix
                name = name[: -len("_total")]
            out[name] = float(sample.value)
    return out


def parse_slot(raw: Any, reasons: dict[str, str]) -> SlotReading | None:
    """One /slots entry in any known shape; None (with a reason) when it has no usable id."""
    if not isinstance(raw, Mapping):
        reasons["slots"] = "a /slots entry is not an object"
        return None
    sid = json_int(raw.get("id"))
    if sid is None:
        reasons["slots"] = "a /slots entry has no integer id"
        return None
    if isinstance(raw.get("is_processing"), bool):
        processing = raw["is_processing"]
    elif json_int(raw.get("state")) is not None:  # older builds: 0 idle, anything else busy
        processing = json_int(raw.get("state")) != 0
    else:
        processing = False
        reasons[f"slot{sid}.processing"] = "slot shows neither is_processing nor state"
    nt = raw.get("next_token")
    if isinstance(nt, list):
        nt = nt[0] if nt else None
    n_decoded = n_remain = None
    if isinstance(nt, Mapping):
        n_decoded = json_int(nt.get("n_decoded"))
        n_remain = json_int(nt.get("n_remain"), signed=True)  # -1: no limit
    if "n_past" in raw:  # older builds
        context = json_int(raw.get("n_past"))
    elif "n_prompt_tokens_processed" in raw or "n_prompt_tokens_cache" in raw:
        context = json_int(raw.get("n_prompt_tokens"))  # newer: tokens now held, grows while decoding
    else:
        context = None
    if context is None and raw.get("id_task") is not None:
        reasons.setdefault(f"slot{sid}.context_tokens", "this server build does not report tokens held per slot")
    return SlotReading(
        id=sid,
        n_ctx=json_int(raw.get("n_ctx")),
        context_tokens=context,
        processing=processing,
        n_decoded=n_decoded,
        n_remain=n_remain,
        id_task=json_int(raw.get("id_task"), signed=True),  # -1: no task
        n_prompt_tokens_processed=json_int(raw.get("n_prompt_tokens_processed")),
        n_prompt_tokens_cache=json_int(raw.get("n_prompt_tokens_cache")),
    )


def _metrics_key(q: str, slots: tuple[SlotReading, ...]) -> tuple[Any, ...] | None:
    """What the counters kvmon reads depend on: while it is unchanged, /metrics would answer the same.

    llama-server adds to the prompt counters when a prompt has been processed (decoding begins) and to the
    generation counters when a request ends: a slot's task, whether it is busy and whether it has begun decoding
    mark every such moment (an idle slot also by its counts, for a request that came and went between polls).
    ``n_decode_total`` moves on every token but is read only without /slots. None: read every poll.
    """
    if not slots:
        return None
    return (q, *((sl.id, sl.id_task, True, bool(sl.n_decoded)) if sl.processing else
                 (sl.id, sl.id_task, False, sl.n_decoded, sl.context_tokens) for sl in slots))


def looks_like_llama_server(argv: list[str], env: Mapping[str, str] | None) -> bool:
    """Whether a command line is a llama.cpp server (its program name, or a model flag in argv/env)."""
    if not argv:
        return False
    prog = os.path.basename(argv[0]).lower()
    if "llama" in prog or "server" in prog:
        return True
    if env and "LLAMA_ARG_MODEL" in env:
        return True
    args = argv[1:]
    for i, a in enumerate(args):
        flag, eq, inline = a.partition("=")
        value = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
        if flag in ("-hf", "--hf-repo"):
            return True
        if flag in ("-m", "--model") and value.lower().endswith(".gguf"):
            return True
    return False


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
    ) -> None:
        self.base_url = normalize_base_url(base_url)
        self._clock = clock  # timestamps readings; a simulator's clock makes rates come out in its time
        self._http = HttpClient(self.base_url, api_key=api_key, timeout_s=timeout_s)
        self.display_url = self._http.display_url
        parts = urlsplit(self.base_url)
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._config_override = user_config(config_override)
        self._model_override = dict(model_metadata_override) if model_metadata_override else None
        self._inspect_process = inspect_local_process
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
        self._v1_cache: tuple[tuple[Any, ...], Mapping[str, Any] | None, str | None] | None = None
        self._files = ModelFiles()  # the GGUF header and shape of the model file, once per version of it
        self._proc: psutil.Process | None = None
        self._proc_checked_at: float | None = None
        self._proc_alive_at = 0.0
        self._proc_reason: str | None = None
        self._proc_facts: tuple[tuple[int, float | None], tuple[ServerConfig | None, tuple[int, ...],
                                                               dict[str, str]]] | None = None

    def __repr__(self) -> str:
        return f"LlamaServerSource({self.display_url!r})"

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()

    # ---- HTTP helpers -------------------------------------------------------------------------

    def _get_json(self, path: str) -> Any:
        resp = self._http.get(path)
        raise_for_status(resp, path, self.display_url)
        return decode_json(resp, path)

    def _optional_json(self, path: str, reasons: dict[str, str], key: str) -> Any:
        """GET JSON; auth/loading failures abort the poll, anything else becomes a reason and None."""
        try:
            return self._get_json(path)
        except SourceError as e:
            if e.failure.kind in (FailureKind.AUTH_REJECTED, FailureKind.MODEL_LOADING):
                raise
            reasons[key] = e.failure.reason
            self._last_failure_kind = e.failure.kind
            return None

    # ---- poll ---------------------------------------------------------------------------------

    def poll(self) -> ServerReading:
        """Read every endpoint once and combine them; raises SourceError when the server cannot be read."""
        t_mono, t_wall = self._clock(), time.time()
        reasons: dict[str, str] = {}
        # /health answers what /props also shows (loading, key rejected, gone); ask it on the first poll, after a
        # failed one and every HEALTH_EVERY_POLLS polls (older builds say "loading" only there), not every time
        checked, self._health_due = self._health_due, True  # a poll that raises leaves it due
        memo, self._props_memo = self._props_memo, None  # a poll that raises reads /props again
        if checked:
            self._check_health()
        # /props is asked before /slots while the server could be asleep (asking /slots would wake it)
        slots_lately = self._slots_answered_at is not None and t_mono - self._slots_answered_at < SLOTS_KEEP_AWAKE_S
        awake = self._busy or self._never_sleeps or slots_lately
        reused = memo is not None and awake and not checked and memo[2] < REUSE_MAX_POLLS
        if reused and memo is not None:
            props, q, times = memo
            next_memo: tuple[Mapping[str, Any], str, int] | None = (props, q, times + 1)
        else:
            read, q = self._read_props(reasons, checked)
            if read is None:
                return ServerReading(t_monotonic=t_mono, t_wall=t_wall, backend=BACKEND, url=self.display_url,
                                     state="idle", reasons=reasons)
            props = read
            next_memo = (props, q, 0) if "props" not in reasons else None
        reading = self._poll_after_props(props, q, reasons, checked, t_mono, t_wall, reused=reused)
        self._props_memo = next_memo
        return reading

    def _read_props(self, reasons: dict[str, str], checked: bool) -> tuple[Mapping[str, Any] | None, str]:
        """/props (in router mode, the loaded model's, with the query it needs); None: router without a model."""
        props = self._optional_json("/props", reasons, "props")
        if props is None and not checked and self._last_failure_kind in (FailureKind.UNREACHABLE,
                                                                          FailureKind.TIMEOUT):
            raise SourceError(SourceFailure(self._last_failure_kind, reasons["props"], "/props"))
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
        return props or {}, q

    def _poll_after_props(self, props: Mapping[str, Any], q: str, reasons: dict[str, str], checked: bool,
                          t_mono: float, t_wall: float, *, reused: bool = False) -> ServerReading:
        """The rest of a poll once /props is known (read now, or ``reused`` while a slot generates)."""
        t_start = t_mono
        sleeping = props.get("is_sleeping") is True
        state = "sleeping" if sleeping else "ok"
        server_version = json_str(props.get("build_info"))

        slots: tuple[SlotReading, ...] = ()
        live_source: str | None = None
        live_reason: str | None = None
        if sleeping:
            live_reason = "server is sleeping (not polling /slots, which would wake it)"
        elif props.get("endpoint_slots") is False:
            live_reason = "the /slots endpoint is off on this server (--no-slots)"
        else:
            t0 = self._clock()
            raw_slots = self._optional_json("/slots" + q, reasons, "slots")
            # the counters' instant: the middle of the /slots request, not the start of the poll
            t_mono = (t0 + self._clock()) / 2.0
            t_wall += t_mono - t_start
            if raw_slots is None and reused and self._last_failure_kind in (FailureKind.UNREACHABLE,
                                                                             FailureKind.TIMEOUT):
                # /slots is this poll's first request: a server gone or hung is a failure, as /props would say
                raise SourceError(SourceFailure(self._last_failure_kind, reasons["slots"], "/slots"))
            if raw_slots is None:
                live_reason = reasons.get("slots")
            elif not isinstance(raw_slots, list):
                reasons["slots"] = live_reason = "/slots did not return a list"
            else:
                self._slots_answered_at = t0
                parsed = [parse_slot(s, reasons) for s in raw_slots]
                slots = tuple(s for s in parsed if s is not None)
                if slots:
                    live_source = "slots"

        metrics_enabled, metrics = self._read_metrics(props, reasons, q, slots)
        self._busy = any(sl.processing for sl in slots)
        if live_source is None and not sleeping and "n_decode_total" in metrics:
            live_source = "metrics"  # one slot: n_decode_total stands in (see kvmon.core.rates)

        model, model_reasons = self._model_info(props, unquote(q[len("?model="):]) if q else None)
        reasons.update(model_reasons)
        config, pids = self._config(reasons)
        self._never_sleeps = config.sleep_idle_seconds is not None and config.sleep_idle_seconds < 0

        total_slots = json_int(props.get("total_slots"))
        if total_slots is None and slots:
            total_slots = len(slots)
        config = self._derive_totals(config, props, slots, total_slots)

        if live_source is None and live_reason is None:
            live_reason = "no live counters (no /slots and no /metrics)"
        self._polls_since_health = 0 if checked else self._polls_since_health + 1
        self._health_due = self._polls_since_health + 1 >= HEALTH_EVERY_POLLS
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
            config=config,
            live_rate_source=live_source,
            live_rate_unavailable_reason=None if live_source else live_reason,
            server_pids=pids,
            reasons=reasons,
        )

    def _check_health(self) -> None:
        """/health: loading (503, or an older build's status text) and unreachable servers end the poll."""
        resp = self._http.get("/health")
        body: Any = None
        try:
            body = decode_json(resp, "/health")
        except SourceError:
            body = None
        status = body.get("status") if isinstance(body, Mapping) else None
        if isinstance(status, str) and "loading" in status.lower():
            raise SourceError(SourceFailure(FailureKind.MODEL_LOADING, f"{self.display_url} is loading the model",
                                            "/health", resp.status_code))
        if resp.status_code == 503 and isinstance(status, str) and "no slot" in status.lower():
            return  # older builds: every slot busy, the server is fine
        if resp.status_code == 404:
            return  # not all builds have it; /props decides
        if resp.status_code == 503 or resp.status_code in (401, 403):
            raise_for_status(resp, "/health", self.display_url)
        if isinstance(status, str) and status.lower() == "error":
            raise SourceError(SourceFailure(FailureKind.SERVER_ERROR, f"{self.display_url} reports an error state "
                                            "(model failed to load?)", "/health", resp.status_code))

    def _read_metrics(
        self, props: Mapping[str, Any], reasons: dict[str, str], q: str = "", slots: tuple[SlotReading, ...] = ()
    ) -> tuple[bool | None, dict[str, float]]:
        key = _metrics_key(q, slots)
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
            return flag if isinstance(flag, bool) else None, {}
        try:
            return True, parse_metrics(resp.text)
        except (ValueError, TypeError, IndexError, KeyError) as e:
            reasons["metrics"] = f"/metrics text not understood ({str(e)[:80]})"
            return True, {}

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
            if e["status"].get("value") == "loaded" and isinstance(e.get("id"), str):
                return True, e["id"]
        return True, None

    def _v1_models(
        self, key: tuple[Any, ...], model_id: str | None = None
    ) -> tuple[Mapping[str, Any] | None, str | None]:
        """The /v1/models entry (``model_id``'s, else ``data[0]``), cached per model since it changes on reload."""
        if self._v1_cache is not None and self._v1_cache[0] == key and self._v1_cache[1] is not None:
            return self._v1_cache[1], self._v1_cache[2]
        reasons: dict[str, str] = {}
        body = self._optional_json("/v1/models", reasons, "v1_models")
        entry: Mapping[str, Any] | None = None
        why = reasons.get("v1_models")
        if body is not None:
            data = body.get("data") if isinstance(body, Mapping) else None
            chosen = [e for e in data if isinstance(e, Mapping) and e.get("id") == model_id] if (
                isinstance(data, list) and model_id) else []
            if chosen:
                entry = chosen[0]
            elif isinstance(data, list) and data and isinstance(data[0], Mapping):
                entry = data[0]
            else:
                why = "/v1/models has no data[0] entry"
        self._v1_cache = (key, entry, why)
        return entry, why

    def _resolve_model_path(self, model_path: str | None) -> str | None:
        if not model_path:
            return None
        if os.path.isabs(model_path):
            return model_path
        proc = self._local_process()
        cwd = procs.process_cwd(proc) if proc is not None else None
        return os.path.join(cwd, model_path) if cwd else None

    def _model_info(self, props: Mapping[str, Any], model_id: str | None = None) -> tuple[ModelInfo, dict[str, str]]:
        reasons: dict[str, str] = {}
        model_path = json_str(props.get("model_path"))
        entry, why = self._v1_models((model_path, props.get("build_info"), model_id), model_id)
        if why:
            reasons["v1_models"] = why
        meta = entry.get("meta") if entry is not None else None
        meta = meta if isinstance(meta, Mapping) else {}
        name = json_str(props.get("model_alias")) or (json_str(entry.get("id")) if entry else None)
        if name is None and model_path:
            name = os.path.basename(model_path)
        quant = json_str(props.get("model_ftype")) or json_str(meta.get("ftype"))
        n_params = json_int(meta.get("n_params"))
        weight_bytes = json_int(meta.get("size"))
        n_ctx_train = json_int(meta.get("n_ctx_train"))
        n_embd = json_int(meta.get("n_embd"))

        shape = None
        shape_source = None
        arch = None
        metadata: dict[str, Any] | None = None
        full_path = self._resolve_model_path(model_path)
        file_key = None
        if full_path is not None:
            header, gwhy, file_key = self._files.header(full_path)
            if header is not None:
                metadata = dict(header.metadata)
                shape_source = "gguf"
                if weight_bytes is None and header.tensor_bytes is not None:
                    weight_bytes = header.tensor_bytes
            elif gwhy:
                reasons["model.shape"] = gwhy
        elif model_path:
            reasons["model.shape"] = (
                f"model file {os.path.basename(model_path)!r} is not on this machine (or its folder is unknown)"
            )
        else:
            reasons["model.shape"] = "the server does not say which model file it loaded"
        if self._model_override:
            metadata = {**(metadata or {}), **self._model_override}
            shape_source = "user"
        if metadata is not None:
            arch = json_str(metadata.get("general.architecture"))
            # the same file header (path, size, mtime) gives the same shape (the overrides are fixed): built once
            shape, swhy = self._files.shape(metadata, file_key)
            if swhy:
                reasons["model.shape"] = swhy
                shape_source = None
            else:
                reasons.pop("model.shape", None)
            if arch and n_ctx_train is None:
                n_ctx_train = json_int(metadata.get(f"{arch}.context_length"))
            if arch and n_embd is None:
                n_embd = json_int(metadata.get(f"{arch}.embedding_length"))
            name = name or json_str(metadata.get("general.name"))
        return (
            ModelInfo(
                name=name,
                arch=arch,
                n_params=n_params,
                weight_bytes=weight_bytes,
                n_ctx_train=n_ctx_train,
                n_embd=n_embd,
                quantization=quant,
                path=model_path,
                shape=shape,
                shape_source=shape_source,
            ),
            reasons,
        )

    # ---- config -------------------------------------------------------------------------------

    def _local_process(self) -> psutil.Process | None:
        """The process behind the URL's port when the server runs here (cached, rechecked every 30 s)."""
        if not self._inspect_process or not procs.is_local_host(self._host):
            return None
        now = time.monotonic()
        if self._proc is not None:
            if now - self._proc_alive_at < PROCESS_ALIVE_CHECK_S:
                return self._proc
            try:
                if self._proc.is_running():  # reads /proc: not on every poll
                    self._proc_alive_at = now
                    return self._proc
            except psutil.Error:
                pass
            self._proc = None
            self._proc_checked_at = None
        if self._proc_checked_at is not None and now - self._proc_checked_at < PROCESS_RECHECK_S:
            return None
        self._proc_checked_at = now
        self._proc, self._proc_reason = procs.lookup_listening_process(self._port)
        return self._proc

    def _process_facts(self, proc: psutil.Process) -> tuple[ServerConfig | None, tuple[int, ...], dict[str, str]]:
        """Config from the server process's argv/environment, and its pids; cached per process."""
        key = (proc.pid, self._proc_checked_at)
        if self._proc_facts is not None and self._proc_facts[0] == key:
            return self._proc_facts[1]
        reasons: dict[str, str] = {}
        config: ServerConfig | None = None
        pids: tuple[int, ...] = ()
        argv, why = procs.process_cmdline(proc)
        env, ewhy = procs.process_environ(proc)
        if argv is not None and not looks_like_llama_server(argv, env):
            reasons["config.process"] = (
                f"the process on port {self._port} ({os.path.basename(argv[0]) if argv else '?'}) "
                "does not look like llama-server; its command line is not used"
            )
        elif argv is not None:
            config = parse_llama_server_args(argv[1:], env or {}).config
            pids = procs.process_tree_pids(proc.pid)
            if ewhy:
                reasons["config.environment"] = ewhy
        elif why:
            reasons["config.process"] = why
        facts = (config, pids, reasons)
        self._proc_facts = (key, facts)
        return facts

    def _config(self, reasons: dict[str, str]) -> tuple[ServerConfig, tuple[int, ...]]:
        """Defaults < local process argv/environment < log file < user settings, field by field."""
        layers: list[ServerConfig | None] = [_default_config()]
        pids: tuple[int, ...] = ()
        proc = self._local_process()
        if proc is not None:
            proc_config, pids, proc_reasons = self._process_facts(proc)
            layers.append(proc_config)
            reasons.update(proc_reasons)
        elif self._inspect_process:
            if not procs.is_local_host(self._host):
                reasons["config.process"] = (
                    "server is not on this machine: KV type, flash attention and layers come from --log or settings"
                )
            elif self._proc_reason:
                reasons["config.process"] = self._proc_reason
        if self._log is not None:
            layers.append(self._log.poll())
            if self._log.error:
                reasons["config.log"] = self._log.error
        layers.append(self._config_override)
        return merge_configs(*layers), pids

    @staticmethod
    def _derive_totals(
        config: ServerConfig, props: Mapping[str, Any], slots: tuple[SlotReading, ...], total_slots: int | None
    ) -> ServerConfig:
        """Fill the total context from per-slot n_ctx when the argv/log did not say it."""
        if config.kv_unified is None and total_slots == 1:
            config = dataclasses.replace(
                config, kv_unified=False, provenance={**config.provenance, "kv_unified": Provenance.COMPUTED}
            )
        if config.n_parallel is None and total_slots is not None:
            config = dataclasses.replace(
                config, n_parallel=total_slots, provenance={**config.provenance, "n_parallel": Provenance.MEASURED}
            )
        gs = props.get("default_generation_settings")
        slot_ctx = json_int(gs.get("n_ctx")) if isinstance(gs, Mapping) else None
        if slot_ctx is None and slots:
            slot_ctx = slots[0].n_ctx
        if slot_ctx is not None and getattr(config, "n_ctx_per_slot", None) is None:
            config = dataclasses.replace(
                config, n_ctx_per_slot=slot_ctx, provenance={**config.provenance, "n_ctx_per_slot": Provenance.MEASURED}
            )
        if config.n_ctx_total is not None:
            return config
        if slot_ctx is None or config.kv_unified is None:
            return config
        if config.kv_unified:
            total = slot_ctx  # every slot shows the whole shared pool
        elif total_slots:
            total = slot_ctx * total_slots
        else:
            return config
        return dataclasses.replace(
            config, n_ctx_total=total, provenance={**config.provenance, "n_ctx_total": Provenance.COMPUTED}
        )
