"""What llama-server's endpoints answer, read into plain values: ``/metrics`` counters and ``/slots`` entries in
every known shape, what decides whether ``/metrics`` could have moved since the last poll, and the total context
that ``/props`` and the slots imply when the command line did not say it.

Parsing only: ``kvmon.sources.llamacpp.source`` asks the endpoints and builds the reading.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from kvmon.core.jsonvals import json_float, json_int
from kvmon.core.readings import (
    ACCEPTED_PER_POSITION,
    Provenance,
    ServerConfig,
    SlotReading,
    position_counter,
)

METRIC_PREFIX = "llamacpp:"
REQUESTS_PROCESSING = "requests_processing"  # the one gauge read: the requests being processed now (busy slots)
_KEPT_GAUGES = frozenset({METRIC_PREFIX + REQUESTS_PROCESSING})
MAX_LAYOUT_LINES = 400  # a page this long keeps no layout (llama-server's has ~40 lines; the pattern would be large)


class MetricsTextError(ValueError):
    """``/metrics`` answered something that is not Prometheus text."""


_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_PLAIN_SAMPLE = re.compile(rf"({_NAME}) (\S+)(?: -?[0-9]+)?\Z")
_LABELLED_SAMPLE = re.compile(rf"{_NAME}\{{(?:[a-zA-Z_][a-zA-Z0-9_]*=\"[^\"\\\n{{}}]*\",?)+\}} \S+(?: -?[0-9]+)?\Z")
_COMMENT = re.compile(rf"# (?:HELP {_NAME}(?: .*)?|TYPE ({_NAME}) (counter|gauge|histogram|summary|untyped))\Z")
_POSITION_SAMPLE = re.compile(r'\{position="([0-9]{1,3})"\} (\S+)(?: -?[0-9]+)?\Z')  # of the per-position counter
_PER_POSITION = METRIC_PREFIX + ACCEPTED_PER_POSITION
_POSITION = re.compile(r"[0-9]{1,3}")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|Inf|NaN)\Z")


def _plain_counters(text: str) -> list[tuple[str, float]] | None:
    """The unlabelled counters of exposition text written the way llama-server writes it (each sample named as its
    ``# TYPE`` line, one sample per line), in order; None for anything else (the full parser then decides).

    A fast path: the full parser costs several times as much per poll, and llama-server's page is always this
    simple; any line outside these few forms (an escape, a label with a quote in it, a sample named unlike its
    family) sends the whole page to the full parser, so both read the same.
    """
    out: list[tuple[str, float]] = []
    family: str | None = None
    kind: str | None = None
    declared: set[str] = set()
    for line in text.split("\n"):
        if not line:
            continue
        if line[0] == "#":
            if not line.startswith(("# HELP ", "# TYPE ")):
                if line.startswith(("#HELP", "#TYPE", "# HELP", "# TYPE")):
                    return None
                continue  # a comment
            m = _COMMENT.match(line)
            if m is None:
                return None
            if m.group(1) is not None:
                if m.group(1) in declared:
                    return None
                declared.add(m.group(1))
                family, kind = m.group(1), m.group(2)
            continue
        m = _PLAIN_SAMPLE.match(line)
        if m is None:
            if _LABELLED_SAMPLE.match(line) is None or line.split("{", 1)[0] != family:
                return None
            if _FLOAT.match(line[line.index("} ") + 2:].split(" ", 1)[0]) is None:
                return None  # (the full parser fails the whole page on a value that is not a number)
            if family == _PER_POSITION and kind == "counter":  # speculative decoding's acceptance by position
                p = _POSITION_SAMPLE.match(line, len(family))
                if p is None:
                    return None
                out.append((_position_key(p.group(1)), float(p.group(2))))
            continue  # another labelled sample of the family just declared: not a plain counter
        name, value = m.group(1), m.group(2)
        if name != family or _FLOAT.match(value) is None or name.endswith("_created"):
            return None  # (the full parser reads a ``_created`` sample as its family's creation time)
        if kind == "counter":
            if not name.endswith("_total") and f"{name}_total" in text:
                return None  # the full parser names such a counter by whether its _total form is on the page
            out.append((name, float(value)))
        elif kind == "gauge" and name in _KEPT_GAUGES:
            out.append((name, float(value)))
    return out


def _position_key(text: str) -> str:
    """The metrics key of the per-position counter at ``text`` (a draft position as the page writes it)."""
    return METRIC_PREFIX + position_counter(ACCEPTED_PER_POSITION, int(text))


def parse_metrics(text: str, rejected: list[str] | None = None) -> dict[str, float]:
    """Counters from llama-server's Prometheus text, without the ``llamacpp:`` prefix; gauges are dropped but
    ``requests_processing`` (whether a request runs, where /slots is not read). The one labelled counter kept is
    speculative decoding's acceptance by draft position, one key per position
    (``kvmon.core.readings.position_counter``).

    A counter whose value is not a finite, non-negative number within 64 bits is left out and named in
    ``rejected``; text that is not Prometheus exposition raises MetricsTextError.
    """
    plain = _plain_counters(text)
    if plain is not None:
        return _counters(plain, rejected)
    return parse_metrics_fully(text, rejected)


class MetricsReader:
    """``parse_metrics`` for one server's pages, which keep their shape from poll to poll: the last plain page's
    layout (every line as it was, each value a number to be read) is kept as one pattern, and a page that matches it
    whole is read by that one match. Only the numbers can differ from a page the fast path read, and those it reads
    as numbers, so the answer is the same; any other page is read as ``parse_metrics`` reads it, and its layout kept.
    """

    def __init__(self) -> None:
        self._layout: re.Pattern[str] | None = None
        self._names: tuple[str, ...] = ()  # the counters the layout's groups hold, in order
        self.layout_reads = 0  # pages read by the layout alone (for tests and benchmarks)

    def read(self, text: str, rejected: list[str] | None = None) -> dict[str, float]:
        """The counters of ``text`` (see ``parse_metrics``)."""
        if self._layout is not None:
            m = self._layout.fullmatch(text)
            if m is not None:
                self.layout_reads += 1
                return _counters([(n, float(v)) for n, v in zip(self._names, m.groups(), strict=True)], rejected)
        plain = _plain_counters(text)
        if plain is None:
            self._layout, self._names = None, ()
            return parse_metrics_fully(text, rejected)
        self._layout, self._names = _layout(text) if text.count("\n") <= MAX_LAYOUT_LINES else (None, ())
        return _counters(plain, rejected)


_VALUE = _FLOAT.pattern.removesuffix(r"\Z")
_STAMP = "(?: -?[0-9]+)?"


def _layout(text: str) -> tuple[re.Pattern[str], tuple[str, ...]]:
    """The pattern of a page ``_plain_counters`` read: each line as written, each sample's value (and timestamp) any
    number; the counters it reads are groups, named in the tuple in page order."""
    parts: list[str] = []
    names: list[str] = []
    family, kind = None, None
    for line in text.split("\n"):
        if not line or line[0] == "#":
            m = _COMMENT.match(line) if line else None
            if m is not None and m.group(1) is not None:
                family, kind = m.group(1), m.group(2)
            parts.append(re.escape(line))
            continue
        plain = _PLAIN_SAMPLE.match(line)
        start = len(plain.group(1)) + 1 if plain is not None else line.index("} ") + 2
        counted = (kind == "counter" and (plain is not None or family == _PER_POSITION)) or (
            kind == "gauge" and plain is not None and plain.group(1) in _KEPT_GAUGES)
        if counted:
            names.append(plain.group(1) if plain is not None else
                         _position_key(line[line.index('"') + 1:line.index('"}')]))
        parts.append(re.escape(line[:start]) + (f"({_VALUE})" if counted else f"(?:{_VALUE})") + _STAMP)
    return re.compile("\n".join(parts)), tuple(names)


def parse_metrics_fully(text: str, rejected: list[str] | None = None) -> dict[str, float]:
    """``parse_metrics`` by prometheus_client's parser alone: any exposition text, at several times the cost."""
    from prometheus_client.parser import text_string_to_metric_families  # only needed for unusual pages

    out: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            if family.type != "counter" and not (family.type == "gauge" and family.name in _KEPT_GAUGES):
                continue
            for sample in family.samples:
                name = sample.name
                if sample.labels:
                    pos = sample.labels.get("position", "")
                    if name != _PER_POSITION or set(sample.labels) != {"position"} or not _POSITION.fullmatch(pos):
                        continue
                    name = _position_key(pos)
                if name.startswith(METRIC_PREFIX):
                    name = name[len(METRIC_PREFIX) :]
                if name.endswith("_created"):
                    continue
                if name.endswith("_total") and sample.name not in text:  # parser added the suffix
                    name = name[: -len("_total")]
                value = json_float(sample.value)
                if value is None:
                    if rejected is not None:
                        rejected.append(name)
                    continue
                out[name] = value
    except (ValueError, TypeError, IndexError, KeyError, AttributeError) as e:  # what the parser raises
        raise MetricsTextError(str(e)[:120] or type(e).__name__) from None
    return out


def _counters(samples: list[tuple[str, float]], rejected: list[str] | None) -> dict[str, float]:
    """The fast path's samples as ``parse_metrics`` gives them: prefix off, ``_created`` dropped, bad values named."""
    out: dict[str, float] = {}
    for full, raw in samples:
        name = full[len(METRIC_PREFIX):] if full.startswith(METRIC_PREFIX) else full
        if name.endswith("_created"):
            continue
        value = json_float(raw)
        if value is None:
            if rejected is not None:
                rejected.append(name)
            continue
        out[name] = value
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
        speculative=raw["speculative"] if isinstance(raw.get("speculative"), bool) else None,
    )


def metrics_key(q: str, slots: tuple[SlotReading, ...]) -> tuple[Any, ...] | None:
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


def derive_totals(
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
