"""Dashboard formatting: the core's human units (kvmon.core.units) plus tooltip text that says where a number came from.

Unknown values render as "—"; the tooltip then gives the reason, and where a number came from in words
(``kvmon.core.words``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvmon.core.snapshot import Activity
from kvmon.core.units import (
    DASH,
    dash_when_unknown,
    fmt_bandwidth,
    fmt_bytes,
    fmt_duration,
    fmt_percent,
    fmt_tok_s,
    fmt_tokens,
)
from kvmon.core.words import provenance_words

__all__ = ["DASH", "Hero", "bytes_", "causes_text", "ctx_label", "duration", "gb_s", "hero", "next_reply_text",
           "num_tok_s", "percent", "percent_value", "plain", "tip", "tok_s", "tokens", "wait"]

if TYPE_CHECKING:
    from kvmon.core.snapshot import Snapshot

tok_s = fmt_tok_s
bytes_ = fmt_bytes
tokens = fmt_tokens
gb_s = fmt_bandwidth
percent = fmt_percent
duration = fmt_duration


def num_tok_s(v: float | None) -> str:
    """Tokens per second without the unit ("61", "38.2")."""
    s = fmt_tok_s(v)
    return s.removesuffix(" tok/s")


def ctx_label(v: int) -> str:
    """A milestone label: 8K, 32K, 128K, 1M (binary thousands, as context sizes are set)."""
    if v >= 1_048_576 and v % 1_048_576 == 0:
        return f"{v // 1_048_576}M"
    if v >= 1024 and v % 1024 == 0:
        return f"{v // 1024}K"
    return f"{v:,}"


@dash_when_unknown
def percent_value(p: float) -> str:
    """A value already in percent ("72%")."""
    return f"{p:.0f}%"


def tip(what: str, key: str | None = None, provenance: Mapping[str, str] | None = None,
        reasons: Mapping[str, str] | None = None, unknown: bool = False) -> str:
    """A tooltip: what the number is, where it came from, and why it is unknown when it is."""
    lines = [what]
    src = (provenance or {}).get(key) if key else None
    if src:
        lines.append(f"Source: {provenance_words(src)}")
    if unknown:
        why = (reasons or {}).get(key) if key else None
        lines.append(f"Unknown: {why}" if why else "Unknown: not reported by the server or GPU")
    return "\n".join(lines)


@dataclass(frozen=True)
class Hero:
    """The headline's big number, always decode tokens per second, and the words beside it: the header, the caption
    and the report card say the same."""

    number: str  # "30.5 tok/s": measured at this poll, or the last one measured; "— tok/s" before any
    live: bool  # measured at this poll (else shown dimmed, with its age)
    against: str  # "of 44.7 ceiling · 68%", "last reply, 12 s ago · ceiling 118 tok/s here", "no reply measured yet"
    prompt: str = ""  # the prompt's own slot: "prompt 6,346 tok/s", "last prompt 6,346 tok/s · first token 2.1 s"
    share: str = ""  # "68%" while it decodes under a known ceiling, else ""


def _ago(s: Snapshot) -> str:
    """"last reply, 12 s ago" (the last decode speed measured), or that none was."""
    last = s.last_decode
    if last is None:
        return "no reply measured yet"
    age = s.t_monotonic - last.t_monotonic
    return "last reply, just now" if age < 1.0 else f"last reply, {fmt_duration(age)} ago"


def hero(s: Snapshot) -> Hero:
    """What the headline's big number and the words beside it say for a snapshot."""
    dec, ceil = s.decode_tok_s, s.ceiling_tok_s
    sp = s.speculative
    spec = f" (speculative, {sp.tokens_per_step:.2f} tokens/step)" if sp is not None and sp.tokens_per_step and \
        ceil is not None else ""
    prompt = ""
    if s.activity is Activity.PROCESSING and s.prefill_tok_s is not None:
        prompt = f"prompt {fmt_tok_s(s.prefill_tok_s)}"
    elif (lat := s.latency) is not None and lat.ttft_last_s is not None:
        speed = f" {fmt_tok_s(lat.last_prefill_tok_s)}" if lat.last_prefill_tok_s else ""
        wait = lat.ttft_last_s
        prompt = f"last prompt{speed} · first token {f'{wait * 1000:.0f} ms' if wait < 1 else f'{wait:.1f} s'}"
    if dec is not None:
        if s.ceiling_suspect is not None:
            against = f"above the ~{num_tok_s(ceil)} ceiling · ceiling uncertain" if ceil else "ceiling uncertain"
        elif sp is not None and not sp.tokens_per_step:
            against = "speculating: its ceiling is known once a reply ends"
        elif ceil is not None and s.efficiency is not None:
            return Hero(fmt_tok_s(dec), True, f"of {num_tok_s(ceil)} ceiling{spec} · {fmt_percent(s.efficiency)}",
                        prompt, fmt_percent(s.efficiency))
        else:
            against = "ceiling unknown"
        return Hero(fmt_tok_s(dec), True, against, prompt)
    last = s.last_decode
    here = f" · ceiling {num_tok_s(ceil)} tok/s here{spec}" if ceil is not None and s.activity is not Activity.LOADING \
        else ""
    return Hero(fmt_tok_s(last.tok_s) if last is not None else f"{DASH} tok/s", False, _ago(s) + here, prompt)


def speculation_text(s: Snapshot) -> str:
    """Speculative decoding in one line for tooltips: tokens per target step, acceptance, and acceptance at each
    draft position ("1st 54%, 2nd 30%, 3rd 16% of drafts"); empty when the server does not speculate."""
    sp = s.speculative
    if sp is None:
        return ""
    if not sp.tokens_per_step:
        return "Speculative decoding: counted when a reply ends"
    text = (f"Speculative decoding: {sp.tokens_per_step:.2f} tokens per target step; "
            f"{percent(sp.acceptance_rate)} of drafted tokens accepted")
    if sp.acceptance_by_position:
        text += "; by draft position " + ", ".join(f"{_ordinal(i + 1)} {percent(r)}" for i, r in
                                                   enumerate(sp.acceptance_by_position)) + " of drafts"
    return text


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


_CODE = re.compile(r"`([^`]+)`")


def plain(text: str) -> str:
    """A message for plain-text places (labels, notifications, tooltips): the backticks around code dropped."""
    return _CODE.sub(lambda m: m.group(1), text)


def wait(seconds: float) -> str:
    """A short wait for people: "40 ms", "2.3 s", "≈ 2 min"."""
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else fmt_duration(seconds)


def causes_text(s: Snapshot) -> str:
    """Why decode runs below the ceiling, one cause a line with its share of the gap (a tooltip's lines)."""
    from kvmon.core.words import cause_name

    lines = [f"{cause_name(c.code)}" + (f" ({c.share:.0%} of the gap)" if c.share is not None else "") + f": "
             f"{plain(c.message)}" for c in s.slowdown_causes]
    return "Why below the ceiling:\n" + "\n".join(lines) if lines else ""


def next_reply_text(s: Snapshot) -> tuple[str, str]:
    """The next turn's predicted time to first token, for the context line, and its tooltip ("" when unknown)."""
    v = s.prompt_cache
    if v is None or v.next_ttft_s is None or v.next_prompt_tokens is None:
        return "", ""
    said = f"next reply's first token in ~{wait(v.next_ttft_s)}"
    how = ("the whole context, the cache keeps missing" if v.miss is not None else
           "what the recent turns added; the cache reuses the rest")
    tip_ = (f"Predicted time to first token of the next turn at this depth: {tokens(v.next_prompt_tokens)} to read "
            f"({how}), at the prompt speed measured against depth this session ({v.source})")
    if v.reads:
        tip_ += (f"\nThis session: {tokens(v.reread_tokens)} read, {tokens(v.reused_tokens)} reused from the cache"
                 + (f", {v.misses} cache miss{'es' if v.misses != 1 else ''}" if v.misses else ""))
    return said, tip_
