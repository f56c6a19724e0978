"""The Snapshot's numeric readings described once: name, unit, help, how to read it, and where it is exported.

The ``once --json`` document (its top-level readings), the Prometheus families, the CSV columns and the plots'
history all read this table, so a reading has one name, one unit and one sentence of help everywhere, and a new
reading is exported by adding one row. Readings that are not here (the connection, the model's names, the devices,
the forecast) have structures of their own in each document.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from kvmon.core.snapshot import Snapshot

Unit = Literal["tokens", "tok/s", "ratio", "bytes", "bytes/token", "bytes/s", "count", "W", "J", "J/token",
               "tokens/Wh", "s"]


def _sum(values: Iterable[int | None]) -> int | None:
    """The total over every device, or None when any is unknown (a partial sum is not the machine's)."""
    vs = list(values)
    if not vs or any(v is None for v in vs):
        return None
    return sum(v for v in vs if v is not None)


@dataclass(frozen=True)
class Field:
    """One numeric reading of a Snapshot; None (unknown) stays None in every document."""

    name: str  # the JSON key, the CSV column and the history series
    unit: Unit
    help: str  # one sentence for people (the Prometheus HELP line)
    get: Callable[[Snapshot], float | int | None]
    prometheus: str | None = None  # the family's name; None: not exported there
    json: bool = False  # a top-level key of the once --json document (the model's are in its "model" object)
    csv: bool = False
    history: bool = False  # a series the plots draw over time


FIELDS: tuple[Field, ...] = (
    Field("n_ctx", "tokens", "Context size of one slot (what one conversation can hold).",
          lambda s: s.model.n_ctx, prometheus="kvmon_context_limit_tokens", csv=True),
    Field("context_tokens", "tokens", "Positions in context of the deepest active conversation.",
          lambda s: s.context_tokens, prometheus="kvmon_context_tokens", json=True, csv=True, history=True),
    Field("decode_tok_s", "tok/s", "Measured decode (generation) speed; absent while idle.",
          lambda s: s.decode_tok_s, prometheus="kvmon_decode_tokens_per_second", json=True, csv=True, history=True),
    Field("prefill_tok_s", "tok/s", "Measured prompt processing speed; absent when no prompt was processed.",
          lambda s: s.prefill_tok_s, prometheus="kvmon_prefill_tokens_per_second", json=True, csv=True,
          history=True),
    Field("ceiling_tok_s", "tok/s", "Decode speed the memory bandwidth allows at the current context depth.",
          lambda s: s.ceiling_tok_s, prometheus="kvmon_ceiling_tokens_per_second", json=True, csv=True,
          history=True),
    Field("efficiency", "ratio", "Measured decode speed divided by the bandwidth ceiling; absent when the speed "
          "exceeds the ceiling (then kvmon_ceiling_uncertain is 1).",
          lambda s: s.efficiency, prometheus="kvmon_efficiency_ratio", json=True, csv=True, history=True),
    Field("kv_in_use_bytes", "bytes", "KV cache holding positions now in context.",
          lambda s: s.kv_in_use_bytes, prometheus="kvmon_kv_cache_in_use_bytes", json=True, csv=True, history=True),
    Field("kv_allocated_bytes", "bytes", "KV cache reserved at load (capacity).",
          lambda s: s.kv_allocated_bytes, prometheus="kvmon_kv_cache_allocated_bytes", json=True, csv=True),
    Field("vram_used_bytes", "bytes", "VRAM in use on every device together (unknown when one is).",
          lambda s: _sum(g.vram_used_bytes for g in s.gpus), csv=True),
    Field("vram_total_bytes", "bytes", "VRAM of every device together (unknown when one is).",
          lambda s: _sum(g.vram_total_bytes for g in s.gpus), csv=True),
    Field("achieved_bandwidth_bytes_per_s", "bytes/s", "Memory bandwidth the measured decode speed implies.",
          lambda s: s.achieved_bandwidth_bytes_per_s, prometheus="kvmon_achieved_bandwidth_bytes_per_second",
          json=True, csv=True, history=True),
    Field("peak_bandwidth_bytes_per_s", "bytes/s", "Peak memory bandwidth of the devices holding the model.",
          lambda s: s.peak_bandwidth_bytes_per_s, prometheus="kvmon_peak_bandwidth_bytes_per_second", json=True,
          csv=True),
    Field("bytes_read_per_token", "bytes/token", "Bytes read from memory per generated token (weights plus KV in "
          "use).", lambda s: s.bytes_read_per_token, prometheus="kvmon_read_bytes_per_token", json=True),
    Field("n_ctx_total", "tokens", "KV cache cells allocated over all slots.",
          lambda s: s.model.n_ctx_total, prometheus="kvmon_context_total_tokens"),
    Field("n_slots", "count", "Number of server slots (parallel conversations).",
          lambda s: s.model.n_slots, prometheus="kvmon_slots"),
    Field("weight_bytes", "bytes", "Size of the model's weights.",
          lambda s: s.model.weight_bytes, prometheus="kvmon_model_weight_bytes"),
    Field("weight_bytes_read_per_token", "bytes/token", "Weight bytes read per generated token (MoE: the active "
          "part).", lambda s: s.model.weight_bytes_read_per_token,
          prometheus="kvmon_model_weight_read_bytes_per_token"),
    Field("speculative_tokens_per_step", "ratio", "Tokens each speculative target step yields (its own plus the "
          "accepted drafted ones, since the server started); absent without speculative decoding.",
          lambda s: s.speculative.tokens_per_step if s.speculative is not None else None,
          prometheus="kvmon_speculative_tokens_per_step", csv=True),
    Field("speculative_acceptance_ratio", "ratio", "Drafted tokens the target accepted, as a share of those drafted "
          "(since the server started).",
          lambda s: s.speculative.acceptance_rate if s.speculative is not None else None,
          prometheus="kvmon_speculative_acceptance_ratio"),
    Field("speculative_draft_read_bytes_per_token", "bytes/token", "Bytes one drafted token reads at the current "
          "depth: the drafter's weights (a draft model's, or the model's MTP layers) and its KV cache in use.",
          lambda s: s.speculative.draft_bytes_per_token if s.speculative is not None else None,
          prometheus="kvmon_speculative_draft_read_bytes_per_token"),
    Field("draft_weight_bytes", "bytes", "Weights of speculative decoding's draft model, held beside the model's "
          "(absent without one; a model's own MTP layers are in its weights).",
          lambda s: s.model.draft_weight_bytes, prometheus="kvmon_draft_model_weight_bytes"),
    Field("draft_kv_bytes_per_token", "bytes/token", "KV cache bytes per position of context of the draft context "
          "(a draft model's or the MTP layers'), all its layers, K and V.",
          lambda s: s.model.draft_kv_bytes_per_token, prometheus="kvmon_draft_kv_cache_bytes_per_token"),
    Field("draft_kv_allocated_bytes", "bytes", "KV cache reserved at load for the draft context of speculative "
          "decoding (the model's cells and sequences, the drafter's layers and cache types).",
          lambda s: s.model.draft_kv_allocated_bytes, prometheus="kvmon_draft_kv_cache_allocated_bytes", csv=True),
    Field("power_w", "W", "Power drawn now by the devices the model runs on (the CPU package's counts every process "
          "on the CPU).", lambda s: s.energy.power_w if s.energy is not None else None,
          prometheus="kvmon_power_watts", json=True, csv=True, history=True),
    Field("energy_j", "J", "Energy the model's devices used while kvmon watched (the intervals every one of them "
          "could be read).", lambda s: s.energy.energy_j if s.energy is not None else None,
          prometheus="kvmon_energy_joules", json=True, csv=True),
    Field("joules_per_token", "J/token", "Energy per generated token: the energy of the decoding intervals over the "
          "tokens decoded in them, this session.", lambda s: s.energy.joules_per_token if s.energy is not None
          else None, prometheus="kvmon_energy_joules_per_token", json=True, csv=True),
    Field("tokens_per_wh", "tokens/Wh", "Generated tokens per watt-hour this session (3600 ÷ joules per token).",
          lambda s: s.energy.tokens_per_wh if s.energy is not None else None,
          prometheus="kvmon_tokens_per_watt_hour", json=True),
    Field("last_reply_energy_j", "J", "Energy of the last reply: its own time (prefill and generation, as the server "
          "timed it) × the power its devices drew meanwhile (an estimate: polls do not fall on its start and end).",
          lambda s: s.energy.last_reply_energy_j if s.energy is not None else None,
          prometheus="kvmon_last_reply_energy_joules", json=True, csv=True),
    Field("last_reply_joules_per_token", "J/token", "Energy per generated token of the last reply: its energy over "
          "its generated tokens.", lambda s: s.energy.last_reply_joules_per_token if s.energy is not None else None,
          prometheus="kvmon_last_reply_energy_joules_per_token", json=True, csv=True),
    Field("ttft_p50_s", "s", "Median time to first token of the session's replies, as the server timed their prefill.",
          lambda s: s.latency.ttft_p50_s if s.latency is not None else None, json=True, csv=True),
    Field("ttft_p95_s", "s", "95th percentile of the session's times to first token.",
          lambda s: s.latency.ttft_p95_s if s.latency is not None else None, json=True, csv=True),
    Field("itl_p50_s", "s", "Median inter-token latency of the session's replies (each reply's seconds per token).",
          lambda s: s.latency.itl_p50_s if s.latency is not None else None, json=True, csv=True),
    Field("itl_p95_s", "s", "95th percentile of the session's inter-token latencies.",
          lambda s: s.latency.itl_p95_s if s.latency is not None else None, json=True, csv=True),
    Field("kv_bytes_per_token", "bytes/token", "KV cache bytes per position of context, all layers, K and V.",
          lambda s: s.model.kv_bytes_per_token, prometheus="kvmon_kv_cache_bytes_per_token"),
)
BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}

JSON_FIELDS = tuple(f for f in FIELDS if f.json)
CSV_FIELDS = tuple(f for f in FIELDS if f.csv)
HISTORY_FIELDS = tuple(f for f in FIELDS if f.history)
PROMETHEUS_FIELDS = tuple(f for f in FIELDS if f.prometheus)
