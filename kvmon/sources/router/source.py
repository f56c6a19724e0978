"""llama-server in router mode (started without a model): its models from ``GET /models``, their load progress from
``GET /models/sse``, and one llama-server source per running model.

Shapes as llama.cpp b11549 writes them (``tools/server/server-models.cpp``): ``/models`` lists every model with
``status.value`` (``unloaded``, ``loading``, ``loaded``, ``sleeping``, ``downloading``), ``status.args`` (the child's
command line, ``--port`` included once it was started), ``exit_code``/``failed`` after a failed start, and the
child's ``meta`` while it runs; there is no progress there, only in the ``status_change`` events of ``/models/sse``.
Per-model endpoints are proxied with ``?model=``, and a GET without ``autoload=false`` LOADS an unloaded model:
the per-model sources always send ``&autoload=false``. ``/slots`` wakes a sleeping model; the per-model source reads
the child's ``/props`` (``is_sleeping``) first, as for any server.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from kvmon.core import serving
from kvmon.core.jsonvals import json_float, json_int, json_object, json_str, json_text
from kvmon.core.readings import FailureKind, SourceError
from kvmon.core.sanitize import plain_text
from kvmon.core.serving import ListedModel, ModelListing
from kvmon.sources.http import HttpClient, normalize_base_url
from kvmon.sources.llamacpp import LLAMA_SERVER
from kvmon.sources.llamacpp.source import LlamaServerSource
from kvmon.sources.procs import flag_value
from kvmon.sources.router.progress import ProgressStream

PROGRESS_MAX_AGE_S = 10.0  # a progress event older than this no longer describes a load in progress
_STATUS = {"loaded": serving.LOADED, "loading": serving.LOADING, "sleeping": serving.SLEEPING,
           "unloaded": serving.UNLOADED, "downloading": serving.DOWNLOADING, "downloaded": serving.UNLOADED}


def _port_in(args: Sequence[str]) -> int | None:
    """The ``--port`` of a child's command line (a model never started shows ``--port 0``: None)."""
    value = flag_value(args, ("--port",))
    return int(value) if value is not None and value.isdigit() and int(value) > 0 else None


def parse_models(body: Any) -> tuple[list[ListedModel], list[str]]:
    """A router's ``/models`` (or ``/v1/models``) document as listed models, and notes on entries left out."""
    notes: list[str] = []
    data = body.get("data") if isinstance(body, Mapping) else None
    if not isinstance(data, list):
        return [], ["/models has no data list"]
    out: list[ListedModel] = []
    for raw in data:
        model_id = json_str(raw.get("id")) if isinstance(raw, Mapping) else None
        if not model_id or not isinstance(raw, Mapping):
            notes.append("an entry without an id")
            continue
        st = json_object(raw.get("status"))
        value = json_str(st.get("value")) or "unknown"
        status = _STATUS.get(value, value)
        exit_code = json_int(st.get("exit_code"), signed=True)
        if st.get("failed") is True:
            status = serving.FAILED
        args = tuple(json_text(a) or "" if isinstance(a, str) else str(a) for a in st.get("args") or ()
                     if isinstance(a, (str, int, float)))  # parsed as a command line, never shown as it is
        aliases = tuple(plain_text(a) for a in raw.get("aliases") or () if isinstance(a, str))
        out.append(ListedModel(name=model_id, status=status, args=args, exit_code=exit_code, aliases=aliases))
    return out, notes


def progress_of(event: Mapping[str, Any]) -> tuple[str | None, float | None]:
    """(status, progress 0..1) of a ``/models/sse`` event (``status_change`` or the README's ``model_status``)."""
    data = json_object(event.get("data"))
    status = json_str(data.get("status"))
    prog = data.get("progress")
    value = json_float(prog.get("value")) if isinstance(prog, Mapping) else None
    return status, (min(1.0, value) if value is not None else None)


class LlamaRouterSource:
    """One llama-server router: ``list_models()`` each poll, ``model_source()`` for each running model."""

    backend = LLAMA_SERVER  # each model is a llama-server: its words are llama-server's
    kind = serving.ROUTER

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout_s: float = 3.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.base_url = normalize_base_url(base_url)
        self._api_key = api_key
        self._timeout_s = timeout_s
        self._clock = clock
        self._http = HttpClient(self.base_url, api_key=api_key, timeout_s=timeout_s)
        self.display_url = self._http.display_url
        self._version: str | None = None
        headers = {"Authorization": f"Bearer {api_key}".encode("latin-1")} if api_key else {}  # as HttpClient sends it
        self._sse = ProgressStream(self.base_url + "/models/sse", headers=headers, clock=clock, timeout_s=timeout_s)

    def __repr__(self) -> str:
        return f"LlamaRouterSource({self.display_url!r})"

    def close(self) -> None:
        self._http.close()
        self._sse.close()

    def list_models(self) -> ModelListing:
        """The models and their status now; raises SourceError when the router cannot be read."""
        reasons: dict[str, str] = {}
        if self._version is None:  # only the build: a /props that fails leaves it unknown, /models decides
            try:
                props = self._http.get_json("/props")
                self._version = json_str(props.get("build_info")) if isinstance(props, Mapping) else None
            except SourceError as e:
                if e.failure.kind in (FailureKind.AUTH_REJECTED, FailureKind.UNREACHABLE):
                    raise
                reasons["version"] = f"build unknown: {e.failure.reason}"
        try:
            models, notes = parse_models(self._http.get_json("/models"))
        except SourceError:
            self._version = None  # asked again after a failure (a restart may bring another build)
            raise
        if notes:
            reasons["models"] = "; ".join(notes)
        loading = any(m.status == serving.LOADING for m in models)
        self._sse.want(loading)
        if loading:
            models = self._with_progress(models, reasons)
        return ModelListing(serving.ROUTER, tuple(models), self._version, reasons)

    def _with_progress(self, models: list[ListedModel], reasons: dict[str, str]) -> list[ListedModel]:
        latest = self._sse.latest()
        now = self._clock()
        out: list[ListedModel] = []
        for m in models:
            got = latest.get(m.name)
            if m.status == serving.LOADING and got is not None and now - got[0] <= PROGRESS_MAX_AGE_S:
                status, progress = progress_of(got[1])
                if status == "loading" and progress is not None:
                    m = dataclasses.replace(m, progress=progress)
            out.append(m)
        if any(m.status == serving.LOADING and m.progress is None for m in out):
            why = self._sse.error or ("has sent no progress yet" if self._sse.connected else "has not answered yet")
            reasons["progress"] = f"load progress unknown: /models/sse {why}"
        return out

    def model_source(self, model: ListedModel) -> LlamaServerSource:
        """A source for one running model, read through the router (``?model=…&autoload=false``)."""
        port = _port_in(model.args)
        host = urlsplit(self.base_url).hostname
        return LlamaServerSource(self.base_url, api_key=self._api_key, timeout_s=self._timeout_s,
                                 model_id=model.name, process_port=port, command_line=model.args or None,
                                 clock=self._clock, inspect_local_process=host is not None)


def server_summary(json: Callable[[str], Any]) -> tuple[str | None, str | None]:
    """(version, a few words on what it serves) for a list of servers, from ``json`` (a path's JSON body, None when
    it answered none)."""
    props = json("/props")
    version = json_str(props.get("build_info")) if isinstance(props, Mapping) else None
    body = json("/models")
    data = body.get("data") if isinstance(body, Mapping) else None
    if not isinstance(data, list):
        return version, None
    loaded = [str(m.get("id")) for m in data if isinstance(m, Mapping)
              and isinstance(m.get("status"), Mapping) and m["status"].get("value") in ("loaded", "loading")]
    return version, f"{len(data)} models, {len(loaded)} loaded" + (f": {', '.join(loaded)}" if loaded else "")
