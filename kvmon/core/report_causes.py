"""Why decode runs below the ceiling and what the prompt cache costs, in the two documents kvmon writes: the
``once --json`` sections (``slowdown_causes``, ``prompt_cache``) and the exporter's families. Figures and kvmon's
own words only: no prompt text ever reaches them (kvmon proxy keeps none)."""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from kvmon.core.snapshot import Snapshot

CAUSE_HELP = ("Estimated share of the gap between measured decode speed and the memory-bus ceiling that one cause "
              "explains (cause: memory_clock, pcie_link, other_processes, cpu_contended, slower_than_before, "
              "drafting, unexplained).")


class Gauges(Protocol):
    """``kvmon.core.report_prometheus.Families``' gauge: one sample, left out when unknown."""

    def gauge(self, name: str, doc: str, labels: Any, values: Any, value: Any) -> None: ...


def causes_json(s: Snapshot) -> list[dict[str, Any]]:
    """``slowdown_causes``: largest share first; share null where it is not estimated."""
    return [dataclasses.asdict(c) for c in s.slowdown_causes]


def prompt_cache_json(s: Snapshot) -> dict[str, Any] | None:
    """``prompt_cache``: prompt tokens read again and reused this session, the latest miss while it is news, what
    made prompts change (through kvmon proxy), and the next turn's time to first token."""
    v = s.prompt_cache
    if v is None:
        return None
    return {
        "source": v.source, "reads": v.reads, "reread_tokens": v.reread_tokens, "reused_tokens": v.reused_tokens,
        "reread_s": v.reread_s, "last_reread_tokens": v.last_reread_tokens, "last_reused_tokens": v.last_reused_tokens,
        "last_reread_s": v.last_reread_s, "misses": v.misses,
        "miss": None if v.miss is None else {"t_wall": v.miss.t_wall, "reread_tokens": v.miss.reread_tokens,
                                             "reused_tokens": v.miss.reused_tokens, "reread_s": v.miss.reread_s},
        "changes": [dataclasses.asdict(c) for c in v.changes],  # every field of each, in order
        "repeated": v.repeated, "next_ttft_s": v.next_ttft_s, "next_prompt_tokens": v.next_prompt_tokens,
    }


def add_families(f: Gauges, s: Snapshot, labels: tuple[str, ...], values: tuple[str, ...]) -> None:
    """The causes' shares and the prompt cache's figures as gauges (a server that was read only)."""
    for c in s.slowdown_causes:
        f.gauge("kvmon_slowdown_cause_share_ratio", CAUSE_HELP, (*labels, "cause"), (*values, c.code), c.share)
    v = s.prompt_cache
    if v is None:
        return
    g = f.gauge
    g("kvmon_prompt_reread_tokens", "Prompt tokens the server read (computed) this session, cached ones left out.",
      labels, values, v.reread_tokens)
    g("kvmon_prompt_reused_tokens", "Prompt tokens the server reused from its prompt cache this session.", labels,
      values, v.reused_tokens)
    g("kvmon_prompt_reread_seconds", "Seconds the server spent reading prompts this session.", labels, values,
      v.reread_s)
    g("kvmon_prompt_cache_misses", "Replies whose long prompt the server read again whole this session.", labels,
      values, v.misses)
    g("kvmon_next_reply_first_token_seconds", "Predicted time to first token of the next turn at this depth.",
      labels, values, v.next_ttft_s)
