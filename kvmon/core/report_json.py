"""The documented ``kvmon once --json`` document, made from one Snapshot (schema in docs/once-json.md).

Scripts and bug reports depend on this shape: fields are only ever added. Unknown values are ``null``
(never 0), non-finite floats become ``null``, and nothing here can carry credentials: the URL is the
snapshot's display URL, already without user, password or query.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping
from typing import Any

from kvmon import __version__
from kvmon.core.curve_config import atlas_json
from kvmon.core.fields import JSON_FIELDS
from kvmon.core.sanitize import clean_text
from kvmon.core.snapshot import LastDecode, Snapshot

SCHEMA_VERSION = 1


def json_safe(value: Any) -> Any:
    """JSON-safe plain values: enums to their value, NaN/inf to None, tuples to lists, keys to str, text valid
    (a lone surrogate that slipped past the sources would stop the UTF-8 writer)."""
    if isinstance(value, enum.Enum):
        return json_safe(value.value)
    if isinstance(value, str):
        return clean_text(value)
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(json_safe(k)): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return str(value)


def devices(s: Snapshot) -> list[dict[str, Any]]:
    """Every memory device of the snapshot in one shape: each GPU or unified-memory device, then host RAM.

    ``id`` is ``gpu<N>`` (N as in ``gpus[]``) or ``host``; ``in_ceiling`` says whether decode reads from it; on Apple
    Silicon host RAM and the unified device are the same memory (``unified_with`` names it).
    """
    out: list[dict[str, Any]] = []
    for g in s.gpus:
        out.append({
            "id": f"gpu{g.index}", **_attrs(g, "kind name vendor source log_name"), "total_bytes": g.vram_total_bytes,
            "used_bytes": g.vram_used_bytes, "free_bytes": g.vram_free_bytes,
            **_attrs(g, "peak_bandwidth_bytes_per_s bandwidth_source weights_bytes kv_allocated_bytes draft_bytes"),
            "in_ceiling": bool(g.weights_bytes or g.kv_allocated_bytes),
            "working_set_limit_bytes": g.working_set_limit_bytes,
        })
    h = s.host
    used = h.ram_total_bytes - h.ram_available_bytes if h.ram_total_bytes is not None and \
        h.ram_available_bytes is not None else None
    out.append({
        "id": "host", "kind": "host_ram", "name": h.cpu_name, "vendor": None, "source": "host", "log_name": None,
        "total_bytes": h.ram_total_bytes, "used_bytes": used, "free_bytes": h.ram_available_bytes,
        "peak_bandwidth_bytes_per_s": h.host_bandwidth_bytes_per_s, "bandwidth_source": h.host_bandwidth_source,
        "weights_bytes": h.weights_in_host_bytes, "kv_allocated_bytes": h.kv_in_host_bytes,
        "draft_bytes": h.draft_in_host_bytes, "in_ceiling": h.in_ceiling, "working_set_limit_bytes": None,
        "unified_with": None if h.unified_with is None else f"gpu{h.unified_with}",
    })
    return out


def _attrs(obj: Any, names: str) -> dict[str, Any]:
    """``obj``'s attributes of these space-separated names, each under its own name, in this order."""
    return {k: getattr(obj, k) for k in names.split()}


def snapshot_to_json(snapshot: Snapshot) -> dict[str, Any]:
    """The ``once --json`` document for ``snapshot``: plain JSON types only."""
    s = snapshot
    m = s.model
    fc = s.forecast
    regime = fc.regime
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kvmon_version": __version__,
        "t_wall": s.t_wall,
        "backend": s.backend,
        "server_version": s.server_version,
        "url": s.url,
        "connection": _attrs(s.connection, "status reason"),
        "model": {
            **_attrs(m, "name server_name arch n_params quantization weight_bytes weight_bytes_read_per_token n_ctx "
                        "n_ctx_total n_ctx_train n_layers n_slots kv_unified kv_type_k kv_type_v flash_attn "
                        "kv_bytes_per_token kv_allocated_bytes recurrent_state_bytes fit fit_target_bytes shape_note"),
            "draft": None if m.draft_name is None else {
                "name": m.draft_name, "weight_bytes": m.draft_weight_bytes, "kv_type_k": m.draft_kv_type_k,
                "kv_type_v": m.draft_kv_type_v, "kv_bytes_per_token": m.draft_kv_bytes_per_token,
                "kv_allocated_bytes": m.draft_kv_allocated_bytes,
            },
        },
        "slots": [_attrs(sl, "id n_ctx context_tokens processing decode_tok_s") for sl in s.slots],
        **{fd.name: fd.get(s) for fd in JSON_FIELDS},  # the readings, as described once (kvmon.core.fields)
        "activity": s.activity,
        "decode_rate_source": s.decode_rate_source,
        "ceiling_uncertain": s.ceiling_suspect is not None,
        "ceiling_suspect": None if s.ceiling_suspect is None else _attrs(s.ceiling_suspect, "input message"),
        "gpus": [
            _attrs(g, "index name vram_total_bytes vram_used_bytes vram_free_bytes peak_bandwidth_bytes_per_s "
                      "bandwidth_source weights_bytes kv_allocated_bytes draft_bytes other_processes_bytes kind vendor "
                      "source log_name memory_source working_set_limit_bytes working_set_source spill_total_bytes "
                      "spill_used_bytes achieved_bandwidth_bytes_per_s step_share")
            for g in s.gpus
        ],
        "gpus_unavailable_reason": s.gpus_unavailable_reason,
        "host": {
            **_attrs(s.host, "ram_total_bytes ram_available_bytes weights_in_host_bytes kv_in_host_bytes "
                             "draft_in_host_bytes server_rss_bytes"),
            "kind": "host_ram",
            **_attrs(s.host, "cpu_name memory_type host_bandwidth_bytes_per_s host_bandwidth_source "
                             "host_bandwidth_measured_at_unix_s swap_total_bytes swap_used_bytes in_ceiling "
                             "achieved_bandwidth_bytes_per_s prompt_cache_limit_bytes"),
        },
        "devices": devices(s),
        "forecast": {
            **_attrs(fc, "tokens_until_ctx_full seconds_until_ctx_full tokens_until_vram_full seconds_until_vram_full"),
            "milestones": [_attrs(ms, "context_tokens tok_s low_tok_s high_tok_s ceiling_tok_s")
                           for ms in fc.milestones],
            "regime": {"index": regime.index or None,
                       **_attrs(regime, "cause description since_t_wall since_context_tokens")},
            "fit": {
                "form": fc.fit_form,
                "points": fc.fit_points,
                "efficiency": fc.fit_efficiency,
                "overhead_s": fc.fit_overhead_s,
                "attention_factor": fc.fit_attention_factor,
                "reason": fc.fit_reason,
                "valid_to_tokens": fc.valid_to_tokens,
            },
        },
        "speculative": None if s.speculative is None else _attrs(
            s.speculative, "drafts draft_tokens accepted_tokens generated_tokens tokens_per_step acceptance_rate "
                           "one_token_ceiling_tok_s draft_weight_bytes drafted_per_step draft_bytes_per_token "
                           "accepted_by_position acceptance_by_position"),
        "energy": None if s.energy is None else {
            **_attrs(s.energy, "power_w energy_j seconds joules_per_token tokens_per_wh devices whole_cpu_package "
                               "last_reply_energy_j last_reply_joules_per_token"),
            "last_reply_tokens_per_wh": (3600.0 / s.energy.last_reply_joules_per_token
                                         if s.energy.last_reply_joules_per_token else None),
            "last_reply_power_w": s.energy.last_reply_power_w,
        },
        "latency": None if s.latency is None else _attrs(
            s.latency, "replies source ttft_last_s ttft_p50_s ttft_p95_s itl_last_s itl_p50_s itl_p95_s itl_mean_s "
                       "last_prompt_tokens last_prefill_tok_s last_generate_s ttft_lower_bound replies_at_least"),
        "serving": _serving(s),
        "slowdown_causes": [dataclasses.asdict(c) for c in s.slowdown_causes],  # largest share first
        "prompt_cache": _prompt_cache(s),
        "atlas": atlas_json(s.atlas),
        "alerts": [_attrs(a, "level code message") for a in s.alerts],
        "verdict": None if s.verdict is None else _attrs(s.verdict, "level state sentence cause"),
        "last_decode": _decode(s.last_decode, s),
        "decode_before": _decode(s.decode_before, s),
        "provenance": dict(s.provenance),
        "reasons": dict(s.reasons),
    }
    return json_safe(doc)  # type: ignore[no-any-return]  # a mapping comes back a dict


def _decode(d: LastDecode | None, s: Snapshot) -> dict[str, Any] | None:
    """A measured decode speed with when it was measured (and how long before this document) and at what depth."""
    if d is None:
        return None
    return {"tok_s": d.tok_s, "t_wall": d.t_wall, "age_s": max(0.0, s.t_monotonic - d.t_monotonic),
            "context_tokens": d.context_tokens}


def _prompt_cache(s: Snapshot) -> dict[str, Any] | None:
    """Prompt tokens read again and reused this session, the latest miss while it is news, what made prompts change
    (through kvmon proxy: figures and kvmon's words, never prompt text), and the next turn's time to first token."""
    v = s.prompt_cache
    if v is None:
        return None
    return {
        **_attrs(v, "source reads reread_tokens reused_tokens reread_s last_reread_tokens last_reused_tokens "
                    "last_reread_s misses"),
        "miss": None if v.miss is None else _attrs(v.miss, "t_wall reread_tokens reused_tokens reread_s"),
        "changes": [dataclasses.asdict(c) for c in v.changes],  # every field of each, in order
        **_attrs(v, "repeated next_ttft_s next_prompt_tokens"),
    }


def _serving(s: Snapshot) -> dict[str, Any] | None:
    """A router's or llama-swap's models (null for a server with one model of its own)."""
    v = s.serving
    if v is None:
        return None
    return {
        **_attrs(v, "kind followed follow_reason message"),
        "models": [_attrs(m, "name status progress followed processing decode_tok_s context_tokens n_ctx n_slots "
                             "kv_allocated_bytes kv_in_use_bytes weight_bytes note") for m in v.models],
        "events": [_attrs(e, "t_wall model kind message") for e in v.events],
    }
