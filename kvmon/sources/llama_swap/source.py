"""llama-swap (a proxy that starts and stops one llama-server per model on demand): its models from ``/v1/models``
and ``/running``, and one llama-server source per running model, read at the model's own upstream URL.

Shapes as llama-swap writes them (mostlygeek/llama-swap ``internal/server/api.go``): ``/v1/models`` lists every
model with ``status.value`` ``loaded`` or ``unloaded`` and ``meta.llamaswap.type`` (``model``, or an alias, peer,
selector or profile entry); ``/running`` lists the processes not stopped with their ``state`` (``starting``,
``ready``, ``stopping``, ``internal/process/process.go``), the resolved ``cmd`` and the ``proxy`` URL. Its own
``/metrics`` carries host and GPU gauges only, no tokens. Requests under ``/upstream/<model>/`` START a stopped
model, so kvmon never reads through them: a model's server is read at its ``proxy`` URL, and only while running.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kvmon.core import serving
from kvmon.core.jsonvals import json_object, json_str, json_text
from kvmon.core.locality import is_loopback_host
from kvmon.core.readings import FailureKind, SourceError, SourceFailure
from kvmon.core.serving import ListedModel, ModelListing
from kvmon.sources import procs
from kvmon.sources.http import HttpClient, normalize_base_url
from kvmon.sources.llamacpp import LLAMA_SERVER
from kvmon.sources.llamacpp.args import parse_llama_server_args
from kvmon.sources.llamacpp.source import LlamaServerSource

_STATE = {"starting": serving.LOADING, "ready": serving.LOADED, "stopping": serving.UNLOADING,
          "stopped": serving.UNLOADED, "shutdown": serving.UNLOADED}


def parse_running(body: Any) -> dict[str, Mapping[str, Any]]:
    """``/running`` as model id → its entry (state, cmd, proxy, ttl)."""
    rows = body.get("running") if isinstance(body, Mapping) else None
    out: dict[str, Mapping[str, Any]] = {}
    for r in rows if isinstance(rows, list) else ():
        name = json_str(r.get("model")) if isinstance(r, Mapping) else None
        if name and isinstance(r, Mapping):
            out[name] = r
    return out


def parse_listing(models_body: Any, running_body: Any) -> tuple[list[ListedModel], list[str]]:
    """Every configured model with its process state, command line and upstream URL."""
    running = parse_running(running_body)
    data = models_body.get("data") if isinstance(models_body, Mapping) else None
    notes: list[str] = [] if isinstance(data, list) else ["/v1/models has no data list"]
    names: list[str] = []
    for raw in data if isinstance(data, list) else ():
        model_id = json_str(raw.get("id")) if isinstance(raw, Mapping) else None
        if not model_id or not isinstance(raw, Mapping):
            continue
        swap = json_object(json_object(raw.get("meta")).get("llamaswap"))
        if swap.get("type", "model") != "model":  # aliases, peers, selectors and profiles are not processes
            continue
        names.append(model_id)
    names += [n for n in running if n not in names]
    out: list[ListedModel] = []
    for name in names:
        r = running.get(name)
        if r is None:
            out.append(ListedModel(name, serving.UNLOADED))
            continue
        state = json_str(r.get("state")) or "unknown"
        cmd = json_text(r.get("cmd")) or ""  # parsed, never shown as it is
        try:
            argv = tuple(shlex.split(cmd, comments=False))
        except ValueError:
            argv = ()
            notes.append(f"{name}: cmd not readable as a command line")
        out.append(ListedModel(name, _STATE.get(state, state), args=argv,
                               upstream_url=json_text(r.get("proxy"))))
    return out, notes


class LlamaSwapSource:
    """One llama-swap: ``list_models()`` each poll (``/v1/models`` + ``/running``), ``model_source()`` per model."""

    backend = LLAMA_SERVER  # each model is a llama-server: its words are llama-server's
    kind = serving.LLAMA_SWAP

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout_s: float = 3.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.base_url = normalize_base_url(base_url)
        self._timeout_s = timeout_s
        self._clock = clock
        self._http = HttpClient(self.base_url, api_key=api_key, timeout_s=timeout_s)
        self.display_url = self._http.display_url
        self._host = urlsplit(self.base_url).hostname or ""
        self._local = procs.is_local_host(self._host)
        self._version: str | None = None
        self._version_reason: str | None = None  # why the version is unknown (asked with the model list)
        self._models_at: tuple[float, Any] | None = None  # /v1/models changes only on a config reload

    def __repr__(self) -> str:
        return f"LlamaSwapSource({self.display_url!r})"

    def close(self) -> None:
        self._http.close()

    def list_models(self) -> ModelListing:
        """The configured models and the running processes now; raises SourceError when llama-swap cannot be read."""
        running = self._http.get_json("/running")
        now = self._clock()
        reasons: dict[str, str] = {}
        if self._models_at is None or now - self._models_at[0] > 30.0:
            try:
                self._models_at = (now, self._http.get_json("/v1/models"))
            except SourceError as e:  # the running models still show; the configured ones are asked again
                if e.failure.kind is FailureKind.AUTH_REJECTED:
                    raise
                reasons["configured"] = f"models not running unknown: {e.failure.reason}"
            try:
                v = self._http.get_json("/api/version")
                self._version = json_str(v.get("version")) if isinstance(v, Mapping) else None
            except SourceError as e:
                self._version = None
                self._version_reason = f"version unknown: {e.failure.reason}"
            else:
                self._version_reason = None
        if self._version_reason:
            reasons["version"] = self._version_reason
        models, notes = parse_listing(self._models_at[1] if self._models_at else {"data": []}, running)
        if self._models_at is None:
            notes = [n for n in notes if "/v1/models" not in n]
        if notes:
            reasons["models"] = "; ".join(notes)
        return ModelListing(serving.LLAMA_SWAP, tuple(models), self._version, reasons)

    def upstream_for(self, model: ListedModel) -> str:
        """Where this model's server answers from here; raises SourceError when kvmon cannot reach it safely."""
        if not model.upstream_url:
            raise SourceError(SourceFailure(FailureKind.NOT_FOUND,
                                            f"llama-swap gives no upstream URL for {model.name}"))
        parts = urlsplit(model.upstream_url)
        if self._local or not is_loopback_host(parts.hostname or ""):
            return model.upstream_url
        bind = parse_llama_server_args(list(model.args)[1:]).host if model.args else None
        if bind in procs.WILDCARD_HOSTS:  # listening on every interface: reachable at llama-swap's address
            netloc = f"[{self._host}]" if ":" in self._host else self._host
            return urlunsplit((parts.scheme, f"{netloc}:{parts.port}", parts.path, "", ""))
        raise SourceError(SourceFailure(
            FailureKind.UNREACHABLE,
            f"{model.name}'s server listens on llama-swap's own loopback ({model.upstream_url}): run kvmon on that "
            "machine for its readings (kvmon does not read through /upstream/, which would start a stopped model)"))

    def model_source(self, model: ListedModel) -> LlamaServerSource:
        """A llama-server source on the model's upstream, with the command line llama-swap started it with."""
        url = self.upstream_for(model)
        key = procs.flag_value(model.args, ("--api-key",))  # the upstream server's own key (never shown)
        return LlamaServerSource(url, api_key=key, timeout_s=self._timeout_s, command_line=model.args or None,
                                 clock=self._clock, model_name=model.name)


def server_summary(json: Callable[[str], Any]) -> tuple[str | None, str | None]:
    """(version, a few words on what it serves) for a list of servers, from ``json`` (a path's JSON body, None when
    it answered none)."""
    names = list(parse_running(json("/running")))
    version = json("/api/version")
    v = json_str(version.get("version")) if isinstance(version, Mapping) else None
    return v, (f"running: {', '.join(names)}" if names else "no model running")
