"""The ``GET /kvmon/stats`` document: its schema, the one place that writes it (the proxy) and the one that reads it
(the Ollama source), so the two cannot drift apart.

``{"kvmon_proxy": 1, "upstream", "upstream_kind", "upstream_version", "listen", "started_unix", "now_unix",
"totals": {TOTALS_FIELDS}, "in_flight": [{IN_FLIGHT_FIELDS}], "recent": [{RECENT_FIELDS}]}``; times are Unix
seconds, rates tokens per second, and a rate that cannot be made honestly is ``null`` with its reason.

Prefill on Ollama >= 0.30 (``kvmon.core.versions``): ``prompt_eval_count`` includes prompt tokens served from the
cache, but ``prompt_eval_duration`` only covers those actually computed, so their ratio overstates prefill speed
(by 100x and more on a long cached conversation). On such an Ollama (or while the version is unknown) a record has
``prompt_tok_s: null`` with the reason, and the count is used only for the context depth (prompt + generated
tokens), which it does describe correctly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kvmon.core.jsonvals import json_float, json_int, json_str
from kvmon.core.readings import FailureKind, PromptChangeReading, RequestStats, SourceError, SourceFailure
from kvmon.core.versions import ollama_counts_cached_prompt
from kvmon.proxy.meter import Meter
from kvmon.proxy.prompts import PromptLog

STATS_PATH = "/kvmon/stats"
DOCUMENT_VERSION = 1  # the value of "kvmon_proxy"
DOCUMENT_FIELDS = ("kvmon_proxy", "upstream", "upstream_kind", "upstream_version", "listen", "started_unix",
                   "now_unix", "totals", "in_flight", "recent", "prompts")
TOTALS_FIELDS = ("requests", "generations", "aborted", "upstream_errors", "bytes_to_upstream", "bytes_to_client",
                 "accept_failures", "connections_refused", "connections_closed_waiting")
IN_FLIGHT_FIELDS = ("id", "method", "path", "model", "started_unix", "age_s", "chunks", "tokens_so_far",
                    "first_token_after_s", "decode_tok_s")
RECENT_FIELDS = ("id", "method", "path", "model", "status", "format", "started_unix", "finished_unix", "aborted",
                 "abort_reason", "chunks", "unparsed_lines", "stats_source", "prompt_tokens", "cached_tokens",
                 "prompt_seconds", "prompt_tok_s", "prompt_tok_s_reason", "predicted_tokens", "predicted_seconds",
                 "decode_tok_s", "decode_tok_s_source", "context_tokens", "client_tok_s", "prompt_reread_tokens",
                 "prompt_reused_tokens", "prompt_change", "prompt_repeated")
CACHED_PROMPT_REASON = (
    "Ollama >= 0.30 counts cached prompt tokens in prompt_eval_count but not in prompt_eval_duration: "
    "prefill rate withheld (it would be overstated)"
)
UNKNOWN_VERSION_REASON = (
    "upstream Ollama version unknown: prompt_eval_count may include cached tokens, prefill rate withheld"
)


# ------------------------------------------------------------------------------------------------ writing


def document(*, upstream: str, upstream_kind: str | None, upstream_version: str | None, listen: str,
             started_unix: float, now_unix: float, totals: dict[str, int], in_flight: list[dict[str, Any]],
             recent: list[dict[str, Any]], prompts: dict[str, Any] | None = None) -> dict[str, Any]:
    """The whole document; totals the proxy has not counted yet are 0; ``prompts``: ``PromptLog.document()``."""
    return {
        "kvmon_proxy": DOCUMENT_VERSION,
        "upstream": upstream,
        "upstream_kind": upstream_kind,
        "upstream_version": upstream_version,
        "listen": listen,
        "started_unix": started_unix,
        "now_unix": now_unix,
        "totals": {**dict.fromkeys(TOTALS_FIELDS, 0), **totals},
        "in_flight": in_flight,
        "recent": recent,
        "prompts": prompts,
    }


def in_flight_record(m: Meter, now_mono: float) -> dict[str, Any]:
    """A request being answered now, as ``in_flight`` lists it."""
    first = m.first_token_mono - m.started_mono if m.first_token_mono is not None else None
    return {
        "id": m.id,
        "method": m.method,
        "path": m.path,
        "model": m.model,
        "started_unix": m.started_unix,
        "age_s": round(now_mono - m.started_mono, 6),
        "chunks": m.chunks,
        "tokens_so_far": m.chunks,
        "first_token_after_s": first,
        "decode_tok_s": m.in_flight_rate(),
    }


LMSTUDIO_PREFILL_REASON = ("LM Studio's time to first token covers the whole prompt, cached part included, and any "
                           "model load: no prefill speed")


def _read_ollama(f: Mapping[str, Any], out: dict[str, Any], upstream_kind: str | None,
                 upstream_version: tuple[int, ...] | None) -> None:
    """The ollama dialect of a finished reply's stats into the record."""
    pc, pd = json_int(f.get("prompt_eval_count")), json_float(f.get("prompt_eval_duration"))
    ec, ed = json_int(f.get("eval_count")), json_float(f.get("eval_duration"))
    out.update(prompt_tokens=pc, predicted_tokens=ec)
    out["prompt_seconds"] = pd / 1e9 if pd is not None else None
    out["predicted_seconds"] = ed / 1e9 if ed is not None else None
    if ec and ed:
        out["decode_tok_s"], out["decode_tok_s_source"] = ec / (ed / 1e9), "server"
    counts_cache = ollama_counts_cached_prompt(upstream_version)
    if counts_cache is False:  # before 0.30 the count is what it read, and its duration covers all of it
        out["prompt_reread_tokens"] = pc
        if pc and pd:
            out["prompt_tok_s"] = pc / (pd / 1e9)
    elif pc:
        out["prompt_tok_s_reason"] = CACHED_PROMPT_REASON if counts_cache else UNKNOWN_VERSION_REASON
    if counts_cache and pc is not None:
        out["context_tokens"] = pc + (ec or 0)


def _read_llama_server(f: Mapping[str, Any], out: dict[str, Any], upstream_kind: str | None,
                       upstream_version: tuple[int, ...] | None) -> None:
    """The llama-server dialect of a finished reply's stats into the record."""
    pn, pms = json_int(f.get("prompt_n")), json_float(f.get("prompt_ms"))
    dn, dms = json_int(f.get("predicted_n")), json_float(f.get("predicted_ms"))
    cn = json_int(f.get("cache_n"))
    out.update(prompt_tokens=pn, cached_tokens=cn, predicted_tokens=dn, prompt_reread_tokens=pn,
               prompt_reused_tokens=cn)
    out["prompt_seconds"] = pms / 1000 if pms is not None else None
    out["predicted_seconds"] = dms / 1000 if dms is not None else None
    if pn and pms:
        out["prompt_tok_s"] = pn / (pms / 1000)
    if dn and dms:
        out["decode_tok_s"], out["decode_tok_s_source"] = dn / (dms / 1000), "server"
    if pn is not None and dn is not None:
        out["context_tokens"] = (cn or 0) + pn + dn


def _read_lmstudio(f: Mapping[str, Any], out: dict[str, Any], upstream_kind: str | None,
                   upstream_version: tuple[int, ...] | None) -> None:
    """The lmstudio dialect of a finished reply's stats into the record."""
    pt, ct = json_int(f.get("prompt_tokens")), json_int(f.get("completion_tokens"))
    gen_s, rate = json_float(f.get("generation_time")), json_float(f.get("tokens_per_second"))
    if gen_s is None and rate and ct:  # REST v1 says the rate, not the time: the time its tokens took at that rate
        gen_s = ct / rate
    out.update(prompt_tokens=pt, predicted_tokens=ct, predicted_seconds=gen_s,
               prompt_seconds=json_float(f.get("time_to_first_token")))
    if rate:
        out["decode_tok_s"], out["decode_tok_s_source"] = rate, "server"
    # time to first token holds the whole prompt (cached part included) and any model load: no prefill speed
    out["prompt_tok_s_reason"] = LMSTUDIO_PREFILL_REASON
    if pt is not None and ct is not None:
        out["context_tokens"] = pt + ct


def _read_openai_usage(f: Mapping[str, Any], out: dict[str, Any], upstream_kind: str | None,
                       upstream_version: tuple[int, ...] | None) -> None:
    """The openai_usage dialect of a finished reply's stats into the record."""
    pt, ct = json_int(f.get("prompt_tokens")), json_int(f.get("completion_tokens"))
    cached = json_int(f.get("cached_tokens"))
    out.update(prompt_tokens=pt, cached_tokens=cached, predicted_tokens=ct, prompt_reused_tokens=cached)
    if pt is not None and cached is not None:
        out["prompt_reread_tokens"] = max(0, pt - cached)
    out["prompt_tok_s_reason"] = "OpenAI-style usage carries no timings"
    # usage prompt_tokens includes cached ones on llama-server and Ollama >= 0.30
    inclusive = (cached is not None or upstream_kind == "other"
                 or bool(ollama_counts_cached_prompt(upstream_version)))
    if pt is not None and ct is not None and inclusive:
        out["context_tokens"] = pt + ct


_DIALECTS: dict[str, Callable[[Mapping[str, Any], dict[str, Any], str | None, tuple[int, ...] | None], None]] = {
    "ollama": _read_ollama,
    "llama-server": _read_llama_server,
    "lmstudio": _read_lmstudio,
    "openai_usage": _read_openai_usage,
}


def finished_record(m: Meter, upstream_kind: str | None,
                    upstream_version: tuple[int, ...] | None) -> dict[str, Any]:
    """A finished request's record in ``recent``: what its body said, and the rates that may be made of it."""
    out: dict[str, Any] = dict.fromkeys(RECENT_FIELDS)  # what the body does not say stays null
    out.update(id=m.id, method=m.method, path=m.path, model=m.model, status=m.status, format=m.format,
               started_unix=m.started_unix, finished_unix=m.finished_unix, aborted=m.aborted,
               abort_reason=m.abort_reason, chunks=m.chunks, unparsed_lines=m.unparsed_lines,
               stats_source=m.stats_source,
               prompt_change=m.prompt.divergence.sentence if m.prompt is not None and m.prompt.divergence else None,
               prompt_repeated=m.prompt.repeated if m.prompt is not None else None)
    reader = _DIALECTS.get(m.stats_source or "")
    if reader is not None:
        reader(m.final, out, upstream_kind, upstream_version)
    rate = m.in_flight_rate()
    if out["decode_tok_s"] is None and rate is not None:
        out["decode_tok_s"], out["decode_tok_s_source"] = rate, "proxy_chunk_timing"
    if rate is not None:  # as the tokens reached the client: the relay goes at its pace; a chunk may hold several
        tokens = out["predicted_tokens"]
        out["client_tok_s"] = rate * tokens / m.chunks if tokens and m.chunks and tokens >= m.chunks else rate
    return out


def observe_prompt(log: PromptLog, m: Meter, body: bytes, upstream_kind: str | None,
                   upstream_version: tuple[int, ...] | None) -> None:
    """Compare a finished request's prompt with its conversation's last one (``kvmon.proxy.prompts``), and count the
    prompt reading its reply reports against what changed; the body is not kept."""
    if not body or m.method != "POST":
        return
    m.prompt = log.compare(body, m.model)
    reader = _DIALECTS.get(m.stats_source or "")
    if m.prompt is None or reader is None:
        return
    figures: dict[str, Any] = {"prompt_reread_tokens": None}
    reader(m.final, figures, upstream_kind, upstream_version)
    log.settle(m.prompt, figures.get("prompt_reread_tokens"), figures.get("prompt_seconds"))


# ------------------------------------------------------------------------------------------------ reading


@dataclass(frozen=True)
class ProxyStream:
    """One request the proxy is streaming now."""

    id: int
    model: str | None
    tokens_so_far: int
    decode_tok_s: float | None


@dataclass(frozen=True)
class ProxyView:
    """The parts of the document a source uses: the streams now, and the last finished request."""

    upstream: str | None
    in_flight: tuple[ProxyStream, ...]
    last: RequestStats | None
    last_model: str | None
    last_prefill_reason: str | None
    now_unix: float | None
    prompt_changes: tuple[PromptChangeReading, ...] = ()


def _records(value: Any) -> list[dict[str, Any]]:
    """The objects of a list field; anything else (a number, a string) holds none."""
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


def parse_stats(body: Any, t_monotonic: float, t_wall: float) -> ProxyView:
    """Read the document; raises SourceError(UNEXPECTED_BODY) if it is not one. Times are put on the reader's clock.

    Whatever answers on the proxy's port is untrusted: every field goes through ``kvmon.core.jsonvals``, and a
    field of the wrong type counts as absent, so an odd document gives fewer values, never an exception.
    """
    if not isinstance(body, dict) or body.get("kvmon_proxy") != DOCUMENT_VERSION:
        raise SourceError(
            SourceFailure(FailureKind.UNEXPECTED_BODY, f"{STATS_PATH} is not a kvmon proxy document", STATS_PATH)
        )
    streams = [ProxyStream(id=sid, model=json_str(s.get("model")), tokens_so_far=json_int(s.get("tokens_so_far")) or 0,
                           decode_tok_s=json_float(s.get("decode_tok_s")))
               for s in _records(body.get("in_flight")) if (sid := json_int(s.get("id"))) is not None]
    last: RequestStats | None = None
    last_model: str | None = None
    prefill_reason: str | None = None
    now_unix = json_float(body.get("now_unix"))
    recent = [r for r in _records(body.get("recent")) if json_str(r.get("stats_source"))]
    if recent:
        r = max(recent, key=lambda r: json_float(r.get("finished_unix")) or 0.0)
        finished = json_float(r.get("finished_unix"))
        age = max(0.0, (now_unix or t_wall) - finished) if finished is not None else 0.0
        prompt_tokens = json_int(r.get("prompt_tokens"))
        withheld = json_str(r.get("prompt_tok_s_reason"))
        if r.get("prompt_tok_s") is None and withheld:
            # The count includes cached tokens the duration does not cover: dividing would inflate prefill.
            prefill_reason = withheld
            prompt_tokens = None
        last = RequestStats(
            t_end=t_monotonic - age,
            prompt_tokens=prompt_tokens,
            cached_tokens=json_int(r.get("cached_tokens")),
            prompt_seconds=json_float(r.get("prompt_seconds")),
            predicted_tokens=json_int(r.get("predicted_tokens")),
            predicted_seconds=json_float(r.get("predicted_seconds")),
            context_tokens=json_int(r.get("context_tokens")),
            client_tok_s=json_float(r.get("client_tok_s")),
            reread_tokens=json_int(r.get("prompt_reread_tokens")),
            prompt_change=json_str(r.get("prompt_change")),
            prompt_repeated=json_int(r.get("prompt_repeated")),
            request_id=json_int(r.get("id")),
        )
        last_model = json_str(r.get("model"))
    return ProxyView(
        upstream=json_str(body.get("upstream")),
        in_flight=tuple(streams),
        last=last,
        last_model=last_model,
        last_prefill_reason=prefill_reason,
        now_unix=now_unix,
        prompt_changes=prompt_changes(body.get("prompts")),
    )


def prompt_changes(section: Any) -> tuple[PromptChangeReading, ...]:
    """The ``prompts`` section's changes, newest first; an odd entry is left out."""
    out = []
    for c in _records(section.get("changes") if isinstance(section, dict) else None):
        sentence, index, count = json_str(c.get("sentence")), json_int(c.get("message_index")), json_int(c.get("count"))
        first, last = json_float(c.get("first_unix")), json_float(c.get("last_unix"))
        if sentence is None or index is None or count is None or first is None or last is None:
            continue
        out.append(PromptChangeReading(
            sentence=sentence, fix=json_str(c.get("fix")) or "", message_index=index,
            role=json_str(c.get("role")) or "", offset=json_int(c.get("offset")),
            change=json_str(c.get("change")) or "",
            count=count, first_unix=first, last_unix=last, reread_tokens=json_int(c.get("reread_tokens")) or 0,
            reread_seconds=json_float(c.get("reread_seconds")) or 0.0))
    return tuple(sorted(out, key=lambda c: -c.last_unix))
