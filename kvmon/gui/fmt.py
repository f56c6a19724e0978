"""Dashboard formatting: the core's human units (kvmon.core.units) plus tooltip text that says where a number came from.

Unknown values render as "—"; the tooltip then gives the reason.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvmon.core.snapshot import Activity
from kvmon.core.units import (
    DASH,
    fmt_bandwidth,
    fmt_bytes,
    fmt_duration,
    fmt_percent,
    fmt_tok_s,
    fmt_tokens,
)

__all__ = ["DASH", "SpeedWords", "bytes_", "code_html", "ctx_label", "duration", "gb_s", "num_tok_s", "percent",
           "percent_value", "plain", "speed_words", "tip", "tok_s", "tokens"]

if TYPE_CHECKING:
    from kvmon.core.snapshot import Snapshot

tok_s = fmt_tok_s
bytes_ = fmt_bytes
tokens = fmt_tokens
gb_s = fmt_bandwidth
percent = fmt_percent
duration = fmt_duration


def _unknown(v: float | None) -> bool:
    return v is None or (isinstance(v, float) and not math.isfinite(v))


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


def percent_value(p: float | None) -> str:
    """A value already in percent ("72%")."""
    if _unknown(p):
        return DASH
    assert p is not None
    return f"{p:.0f}%"


def tip(what: str, key: str | None = None, provenance: Mapping[str, str] | None = None,
        reasons: Mapping[str, str] | None = None, unknown: bool = False) -> str:
    """A tooltip: what the number is, where it came from, and why it is unknown when it is."""
    lines = [what]
    src = (provenance or {}).get(key) if key else None
    if src:
        lines.append(f"Source: {src}")
    if unknown:
        why = (reasons or {}).get(key) if key else None
        lines.append(f"Unknown: {why}" if why else "Unknown: not reported by the server or GPU")
    return "\n".join(lines)


@dataclass(frozen=True)
class SpeedWords:
    """Decode vs ceiling as the header says it, for every place that repeats it (captions, report card)."""

    decode: str  # "30.5 tok/s", "idle" (no slot decoding), "loading" (the model loads), "prompt 2,041 tok/s" or
    # "busy" (a request runs, no decode speed yet), or "—"
    ceiling: str  # "44.7", "~44.7?" (uncertain: the speed is above it) or "—"
    share: str  # "68%", "ceiling uncertain" or "—"
    idle: bool
    uncertain: bool
    loading: bool = False  # the model (re)loads: no speed and no ceiling of this load yet
    speculative: str = ""  # " (speculative, 1.94 tokens/step)": the ceiling counts the tokens each target step yields
    speculating_uncounted: bool = False  # it speculates, and no reply has ended to count by how much
    processing: bool = False  # a request runs and no decode speed was measured yet (its prompt, or its start)

    @property
    def against(self) -> str:
        """The ceiling beside the decode words: "of 44.7 ceiling", or while idle "· ceiling 44.7 tok/s here" (and
        nothing while idle at a depth nobody reports: "idle", not a dash of a ceiling "here"), nothing while the
        model loads."""
        if self.loading:
            return ""
        if self.speculating_uncounted:
            return "· speculating: its ceiling is known once a reply ends"
        if self.idle or self.processing:  # beside a prompt's speed, the ceiling says it is decode's
            what = "decode ceiling" if self.processing else "ceiling"
            return f"· {what} {self.ceiling} tok/s here{self.speculative}" if self.ceiling != DASH else ""
        return f"of {self.ceiling} ceiling{self.speculative}"

    @property
    def no_share(self) -> bool:
        """Nothing decodes (idle, loading), or no ceiling yet to share (speculating, uncounted): no efficiency to put
        beside the headline."""
        return self.idle or self.processing or self.loading or self.speculating_uncounted


def speed_words(s: Snapshot) -> SpeedWords:
    """The header's words for a snapshot's decode speed, ceiling and efficiency."""
    dec, ceil = s.decode_tok_s, s.ceiling_tok_s
    loading = dec is None and s.activity is Activity.LOADING
    idle = not loading and dec is None and s.activity is Activity.IDLE
    processing = not loading and dec is None and s.activity is Activity.PROCESSING
    uncertain = s.ceiling_suspect is not None
    doing = (f"prompt {fmt_tok_s(s.prefill_tok_s)}" if s.prefill_tok_s is not None else "busy") if processing else None
    return SpeedWords(decode="loading" if loading else "idle" if idle else doing or fmt_tok_s(dec),
                      ceiling=f"~{num_tok_s(ceil)}?" if uncertain else num_tok_s(ceil),
                      share="ceiling uncertain" if uncertain else fmt_percent(s.efficiency),
                      idle=idle, uncertain=uncertain, loading=loading,
                      speculative=(f" (speculative, {sp.tokens_per_step:.2f} tokens/step)"
                                   if (sp := s.speculative) is not None and sp.tokens_per_step and ceil is not None
                                   else ""),
                      speculating_uncounted=s.speculative is not None and not s.speculative.tokens_per_step,
                      processing=processing)


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


def code_html(text: str, background: str | None = None) -> str:
    """A message as rich text: escaped, with its `inline code` (commands, flags) set in a monospace font."""
    bg = f" style='background-color:{background}'" if background else ""
    return _CODE.sub(lambda m: f"<code{bg}>&nbsp;{m.group(1)}&nbsp;</code>", html.escape(text, quote=False))


def plain(text: str) -> str:
    """A message for plain-text places (notifications, tooltips): the backticks around code dropped."""
    return _CODE.sub(lambda m: m.group(1), text)
