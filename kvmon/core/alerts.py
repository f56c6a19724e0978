"""Alerts: the engine that turns each poll's facts into ``Alert``s with hysteresis, so nothing flaps.

Analysis gathers the facts of one poll into ``AlertFacts`` (``kvmon.core.alert_types``, with the one set of
thresholds); the rules (``kvmon.core.alert_rules``) say each alert's level, message and headline; ``AlertEngine.update``
holds them. Every rule raises at one threshold and clears only past a second, safer one, and a raised alert is held
for ``min_hold_s`` before it may clear or step down, except when what replaces it is the same cause said anew (VRAM
full soon becoming VRAM full, or the spill itself): one cause is one alert. A connection that keeps failing is one
alert, with the count and the duration. The advice codes (``alert_types.ADVICE``) are tips, never the headline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kvmon.core.alert_rules import (
    rule_cache_advice,
    rule_cpu_only,
    rule_ctx_full,
    rule_kv_in_host,
    rule_log_hint,
    rule_metrics_disabled,
    rule_prefill_bound,
    rule_prompt_cache_ram,
    rule_swap_growing,
    rule_unified_working_set,
    rule_vram_full,
    rule_vram_full_soon,
    rule_weights_in_host,
)
from kvmon.core.alert_rules_prompt import rule_prompt_cache_miss, rule_prompt_repeated
from kvmon.core.alert_types import (
    CONNECTION,
    MODEL_FAILED,
    NOTHING,
    PROMPT_CACHE_MISS,
    PROMPT_REPEATED,
    RECORDING_FAILED,
    AlertFacts,
    AlertThresholds,
    Rule,
    RuleResult,
)
from kvmon.core.connection import FAILURE_STATUS
from kvmon.core.readings import FailureKind
from kvmon.core.severity import STATUS_SEVERITY
from kvmon.core.snapshot import Alert, AlertLevel, ConnectionStatus
from kvmon.core.units import fmt_duration

# a code that is the same cause said anew: while it is up, the ones it replaces go at once (no hold)
SUPERSEDES: Mapping[str, frozenset[str]] = {
    "vram_full": frozenset({"vram_full_soon"}),
    "kv_in_host": frozenset({"vram_full_soon", "vram_full"}),
    "weights_in_host": frozenset({"vram_full_soon", "vram_full"}),
}


def _connection_rule(since: dict[str, float]) -> Rule:
    def rule_connection(f: AlertFacts, th: AlertThresholds, current: AlertLevel | None) -> RuleResult:
        """The server cannot be read (gone, hung, key rejected) for more than a moment: one alert for the one cause,
        with how many polls failed and for how long."""
        if f.connected or f.connection_failure in (None, FailureKind.MODEL_LOADING.value):
            since.clear()
            return NOTHING
        t0 = since.setdefault("t", f.t_monotonic)
        since["n"] = since.get("n", 0) + 1
        try:
            status = FAILURE_STATUS[FailureKind(f.connection_failure)]
        except (ValueError, KeyError):
            return NOTHING
        entry = STATUS_SEVERITY[status]
        if entry is None:
            return NOTHING
        level, words = entry
        needs_user = status in (ConnectionStatus.AUTH_REJECTED, ConnectionStatus.BAD_URL)  # no retry mends these
        if f.t_monotonic - t0 < th.connection_raise_s and not needs_user and current is None:
            return NOTHING
        n = int(since["n"])
        count = (f" ({n} failed polls over {fmt_duration(f.t_monotonic - t0, approx=False)})"
                 if n > 1 and f.t_monotonic - t0 >= 1 else "")
        msg = f"{words}{': ' + f.connection_reason if f.connection_reason else ''}{count}"
        return level, msg, f.t_monotonic - t0, msg

    return rule_connection


@dataclass
class _State:
    level: AlertLevel
    since: float  # when raised or last changed level


@dataclass
class AlertEngine:
    """Stateful evaluation of the rules with hysteresis and a minimum hold time."""

    thresholds: AlertThresholds = field(default_factory=AlertThresholds)
    _state: dict[str, _State] = field(default_factory=dict, init=False, repr=False)
    _conn: dict[str, float] = field(default_factory=dict, init=False, repr=False)
    last_raised: tuple[str, ...] = field(default=(), init=False)  # codes that rose (or escalated) in the last update

    def _rules(self) -> Sequence[tuple[str, Rule]]:
        return (
            (CONNECTION, _connection_rule(self._conn)),
            ("ctx_full_soon", rule_ctx_full),
            ("vram_full_soon", rule_vram_full_soon),
            ("vram_full", rule_vram_full),
            ("kv_in_host", rule_kv_in_host),
            ("weights_in_host", rule_weights_in_host),
            ("cpu_only", rule_cpu_only),
            ("unified_working_set", rule_unified_working_set),
            ("swap_growing", rule_swap_growing),
            ("log_verbosity", rule_log_hint),
            ("metrics_disabled", rule_metrics_disabled),
            ("kv_cache_advice", rule_cache_advice),
            ("prompt_cache_ram", rule_prompt_cache_ram),
            ("prefill_bound", rule_prefill_bound),
            (PROMPT_CACHE_MISS, rule_prompt_cache_miss),
            (PROMPT_REPEATED, rule_prompt_repeated),
        )

    def update(self, facts: AlertFacts) -> tuple[Alert, ...]:
        """Alerts active after this poll, most severe first."""
        t = facts.t_monotonic
        th = self.thresholds
        out: list[Alert] = []
        raised: list[str] = []
        for code, rule in self._rules():
            st = self._state.get(code)
            want, msg, value, headline = rule(facts, th, st.level if st else None)
            if st is None:
                if want is None:
                    continue
                st = self._state[code] = _State(want, t)
                raised.append(code)
            elif want is not None and want.rank > st.level.rank:
                st.level, st.since = want, t
                raised.append(code)
            elif (want is None or want.rank < st.level.rank) and t - st.since >= th.min_hold_s:
                if want is None:
                    del self._state[code]
                    continue
                st.level, st.since = want, t
            if not msg:  # held through a poll where the fact is unknown: keep the last words
                continue
            out.append(Alert(level=st.level, code=code, message=msg, value=value, headline=headline))
        held_unknown = {a.code for a in out}
        for code, st in self._state.items():
            if code not in held_unknown and code in self._last_messages:
                last = self._last_messages[code]
                out.append(Alert(level=st.level, code=code, message=last.message, value=last.value,
                                 headline=last.headline))
        gone = set().union(facts.withdrawn, *(SUPERSEDES.get(a.code, frozenset()) for a in out))
        for code in gone & set(self._state):  # said anew by the alert that replaces it: no hold
            del self._state[code]
        out = [a for a in out if a.code not in gone]
        self._last_messages = {a.code: a for a in out}
        self.last_raised = tuple(raised)
        out.sort(key=lambda a: -a.level.rank)
        return tuple(out)

    _last_messages: dict[str, Alert] = field(default_factory=dict, init=False, repr=False)

    def reset(self) -> None:
        """Forget every alert (a new server or model)."""
        self._state.clear()
        self._conn.clear()
        self._last_messages = {}
        self.last_raised = ()


def with_recording_problem(alerts: Sequence[Alert], problem: str) -> tuple[Alert, ...]:
    """``alerts`` plus the one that says the recording stopped (the monitoring goes on), most severe first."""
    alert = Alert(AlertLevel.WARNING, RECORDING_FAILED,
                  f"Recording stopped: {problem}. The monitoring goes on; free space or pick another file, "
                  "then record again.", headline=f"Recording stopped: {problem}")
    out = [a for a in alerts if a.code != RECORDING_FAILED]
    out.append(alert)
    out.sort(key=lambda a: -a.level.rank)
    return tuple(out)


def model_failed_alerts(alerts: Sequence[Alert], failed: Sequence[tuple[str, int | None]], server: str
                        ) -> tuple[Alert, ...]:
    """``alerts`` plus one warning per model of a router or llama-swap (``server``: its name) that failed to load
    (name, exit status): it holds while the server lists the model as failed."""
    out = [a for a in alerts if a.code != MODEL_FAILED]
    for name, code in failed:
        exit_ = f" (exit status {code})" if code is not None else ""
        out.append(Alert(AlertLevel.WARNING, MODEL_FAILED,
                         f"{name} failed to load{exit_}: its server stopped. The {server}'s log says why (a missing or "
                         "broken model file, too little memory for its settings); fix it, then load it again",
                         value=float(code) if code is not None else None,
                         headline=f"{name} failed to load{exit_}"))
    out.sort(key=lambda a: -a.level.rank)
    return tuple(out)
