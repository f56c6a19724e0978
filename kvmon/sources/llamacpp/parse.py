"""What llama-server's endpoints answer, read into plain values: ``/metrics`` counters and ``/slots`` entries in
every known shape, what decides whether ``/metrics`` could have moved since the last poll, and the total context
that ``/props`` and the slots imply when the command line did not say it.

Parsing only: ``kvmon.sources.llamacpp.source`` asks the endpoints and builds the reading.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from kvmon.core.jsonvals import json_float, json_int, json_str
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
_PER_POSITION = METRIC_PREFIX + ACCEPTED_PER_POSITION
_POSITION = re.compile(r"[0-9]{1,3}")


class MetricsTextError(ValueError):
    """``/metrics`` answered something that is not Prometheus text."""


def parse_metrics(text: str, rejected: list[str] | None = None) -> dict[str, float]:
    """Counters from llama-server's Prometheus text (read by prometheus_client's parser), without the
    ``llamacpp:`` prefix; gauges are dropped but ``requests_processing`` (whether a request runs, where /slots is
    not read). The one labelled counter kept is speculative decoding's acceptance by draft position, one key per
    position (``kvmon.core.readings.position_counter``).

    A counter whose value is not a finite, non-negative number within 64 bits is left out and named in
    ``rejected``; text that is not Prometheus exposition raises MetricsTextError.
    """
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
                    name = METRIC_PREFIX + position_counter(ACCEPTED_PER_POSITION, int(pos))
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


def server_summary(json: Callable[[str], Any]) -> tuple[str | None, str | None]:
    """(version, a few words on what it serves) for a list of servers, from ``json`` (a path's JSON body, None when
    it answered none)."""
    props = json("/props")
    props = props if isinstance(props, Mapping) else {}
    return json_str(props.get("build_info")), json_str(props.get("model_alias"))
