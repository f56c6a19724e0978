"""The prompt cache's alert rules: a long conversation's prompt read again whole (a cache miss), with what made it
change when ``kvmon proxy`` compared the prompts, and the same prompt sent again and again (a client in a loop)."""

from __future__ import annotations

import time

from kvmon.core.alert_types import NOTHING, AlertFacts, AlertThresholds, RuleResult
from kvmon.core.snapshot import AlertLevel, PromptChange
from kvmon.core.units import fmt_count, fmt_duration

PROXY_HINT = ("keep earlier messages unchanged: a system prompt that carries the date or time changes with every "
              "request, and the server then reads the whole prompt again; `kvmon proxy` in front of the server shows "
              "where the prompts change")


def _since(t_unix: float) -> str:
    """A time of day as the user's clock says it ("14:02")."""
    return time.strftime("%H:%M", time.localtime(t_unix))


def _change_words(c: PromptChange) -> str:
    """"system message changed at character 212 — looks like a timestamp; 5 times since 14:02, 41 s of prompt
    reading in all"."""
    cost = f", {fmt_duration(c.reread_seconds)} of prompt reading in all" if c.reread_seconds else ""
    times = "once" if c.count == 1 else f"{fmt_count(c.count)} times since {_since(c.first_unix)}"
    return f"{c.sentence}; {times}{cost}"


def rule_prompt_cache_miss(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """A long conversation's prompt read again whole: what it cost, and why when the proxy saw the prompts change."""
    view = f.prompt_cache
    miss = view.miss if view is not None else None
    if view is None or miss is None:
        return NOTHING
    took = f", {fmt_duration(miss.reread_s, approx=False)}" if miss.reread_s else ""
    head = f"Cache miss: {fmt_count(miss.reread_tokens)} prompt tokens read again{took}"
    change = view.changes[0] if view.changes else None
    if change is not None and change.last_unix >= miss.t_wall - 120.0:  # the proxy saw this prompt change
        msg = f"{head} (the cache reused {fmt_count(miss.reused_tokens)}): {_change_words(change)}; {change.fix}"
        return AlertLevel.WARNING, msg, float(miss.reread_tokens), f"{head} — {change.sentence}"
    msg = f"{head} (the cache reused {fmt_count(miss.reused_tokens)}): {PROXY_HINT}"
    return AlertLevel.WARNING, msg, float(miss.reread_tokens), f"{head}: the conversation's prompt changed"


def rule_prompt_repeated(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
    """The same prompt sent again and again (kvmon proxy compares them): a client retrying or in a loop."""
    view = f.prompt_cache
    n = view.repeated if view is not None else None
    if n is None or n < (th.prompt_repeated_min if current is None else 1):
        return NOTHING
    read = view.last_reread_tokens if view is not None else None
    cost = (f"; the server read {fmt_count(read)} of its tokens again the last time" if read else
            "; the cache serves it, but each reply still costs its generation")
    msg = (f"The same prompt was sent {n + 1} times in a row: a client retrying or looping{cost}. Check the client's "
           "retries and its agent loop")
    return AlertLevel.WARNING, msg, float(n + 1), f"The same prompt sent {n + 1} times in a row: a client in a loop?"
