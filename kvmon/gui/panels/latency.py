"""Replies: time to first token and inter-token latency, the last reply's and the session's median and 95th
percentile, as the server timed them; or why there is nothing yet."""

from __future__ import annotations

from kvmon.core.snapshot import LatencyView, Snapshot
from kvmon.core.units import DASH, fmt_count
from kvmon.gui.text import CaptionedLine


def _s(v: float | None) -> str:
    """Seconds as people read a wait: "0.78 s", "12.4 s"."""
    if v is None:
        return DASH
    return f"{v:.2f} s" if v < 10 else f"{v:.1f} s"


def _ms(v: float | None) -> str:
    return DASH if v is None else f"{v * 1000:.1f} ms"


def latency_text(s: Snapshot) -> tuple[str, str]:
    """(line, tooltip) for one snapshot."""
    lat: LatencyView | None = s.latency
    if lat is None:
        return ("no reply has ended yet", "Time to first token and inter-token latency are counted when a reply "
                "ends (llama-server's counters, vLLM's histograms, or the request's own timings through kvmon's "
                "proxy).")
    n = lat.replies
    if n == 0:  # replies ended (the view is made when one does), and none came with a time
        return ("replies ended, untimed: the server gave no first-token or per-token times",
                f"The replies that ended ({lat.source or 'unknown source'}) gave no prompt or generation times: "
                "the server did not put them in its answers (only token counts), so kvmon cannot time them.")
    at_least = "≥" if lat.ttft_lower_bound else ""  # the counters leave out a draft's prompt processing
    several = s.reasons.get("latency.replies") if lat.replies_at_least else None
    first = ("first token not split per reply" if several and lat.ttft_p50_s is None else
             "first token not timed" if lat.ttft_p50_s is None else  # not "first token — (p95 —)"
             f"first token {at_least}{_s(lat.ttft_p50_s)} (p95 {at_least}{_s(lat.ttft_p95_s)})")
    line = (f"{first} · {_ms(lat.itl_p50_s)}/token (p95 {_ms(lat.itl_p95_s)}) · "
            f"{'≥ ' if lat.replies_at_least else ''}{fmt_count(n)} repl{'y' if n == 1 else 'ies'}")
    prompt = (f" for {fmt_count(lat.last_prompt_tokens)} prompt tokens"
              f" ({'at most ' if at_least else ''}{fmt_count(round(lat.last_prefill_tok_s))} tok/s)"
              if lat.last_prompt_tokens and lat.last_prefill_tok_s else "")
    why = s.reasons.get("latency.ttft")
    tip = ("Medians and 95th percentiles over the session's replies.\n"
           + ("Last reply: first token not timed, then " if lat.ttft_last_s is None else
              f"Last reply: first token after {'at least ' if at_least else ''}{_s(lat.ttft_last_s)}{prompt}, then ")
           + f"{_ms(lat.itl_last_s)} per token.\n"
           f"From {lat.source}: the server's own times (the network and any wait in its queue are not in them)."
           + (f"\nTimes to first token are lower bounds: {why}." if at_least and why else "")
           + (f"\nSeveral replies at once: {several}." if several else ""))
    return line, tip


class LatencyPanel(CaptionedLine):
    """One line: time to first token and inter-token latency over the session (set again when it reads otherwise)."""

    CAPTION = "Replies:"

    def text(self, s: Snapshot) -> tuple[str, str]:  # type: ignore[override]
        return latency_text(s)
