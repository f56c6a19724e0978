"""The verdict: how the session stands, decided once per poll from its Snapshot, in the user's words.

Its level is the worst active condition (an alert that is not advice, or a connection that fails); its sentence is
that condition's news (the alert's headline), or, when nothing is wrong, what the server is doing ("64% of the
memory-bus ceiling at 33.5K tokens", "Idle at 29.8K tokens: up to 118 tok/s there"). The header, the caption of
every picture, the tray, the report card, ``once`` and the exporter all read ``Snapshot.verdict``; none decides again.
While it decodes below the ceiling and one named cause explains enough of the gap (``kvmon.core.analysis.causes``),
the sentence says it: "64% of the memory-bus ceiling at 33.5K tokens — memory clock at 60% of its maximum (power
cap)", and the verdict's cause is that cause's code.

``DecodeMemory`` keeps the last decode speed measured (the headline's number, dimmed with its age, while nothing
decodes) and the last one before the current regime began (the spill's "70 tok/s before the reload").
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Final

from kvmon.core.alert_types import ADVICE, CONNECTION
from kvmon.core.severity import status_level
from kvmon.core.snapshot import (
    Activity,
    Alert,
    ConnectionStatus,
    LastDecode,
    SlowdownCause,
    Snapshot,
    Verdict,
    VerdictLevel,
)
from kvmon.core.units import fmt_percent, fmt_tok_s, fmt_tokens
from kvmon.core.words import suspect_words

_LOADING = re.compile(r"^(\S+) loading(?: (\d+ ?%))?$")  # a router's "qwen3-8b loading 42 %"
_BARE_LOADING = re.compile(r"^(model )?loading( model)?$", re.IGNORECASE)  # llama-server's 503 "Loading model"
UNSEEN: Final = "unseen"  # Snapshot.extra["placement"] when the speed says the model runs on a device kvmon cannot see

# the short word of each condition, for places with little room (the compact view, the tray, the status bar); at
# equal levels the first here is the news (a spill before the warning that foretold it)
ALERT_STATES = {
    "kv_in_host": "Spilled",
    "weights_in_host": "Partly on the CPU",
    "vram_full_soon": "VRAM filling",
    "vram_full": "VRAM full",
    "unified_working_set": "Near the memory limit",
    "model_failed": "Model failed",
    "ctx_full_soon": "Context filling",
    "prompt_cache_miss": "Cache miss",
    "prompt_repeated": "Prompt repeated",
    "cpu_only": "On the CPU",
    "swap_growing": "Swapping",
    "recording_failed": "Recording stopped",
}
STATUS_STATES = {
    ConnectionStatus.UNREACHABLE: "Unreachable",
    ConnectionStatus.TIMEOUT: "Not answering",
    ConnectionStatus.AUTH_REJECTED: "Key rejected",
    ConnectionStatus.BAD_URL: "Bad URL",
    ConnectionStatus.BAD_RESPONSE: "Odd answer",
    ConnectionStatus.CONNECTING: "Connecting",
    ConnectionStatus.LOADING: "Loading",
    ConnectionStatus.SLEEPING: "Asleep",
    ConnectionStatus.PAUSED: "Paused",
}
ACTIVITY_STATES = {Activity.DECODING: "Decoding", Activity.IDLE: "Idle", Activity.PROCESSING: "Reading prompt",
                   Activity.LOADING: "Loading", Activity.UNKNOWN: "Connected"}
# what began the current regime, as the "before" of a speed says it ("70 tok/s before the reload")
BEFORE = {"reload": "the reload", "n_ctx": "the new context size", "cache_types": "the cache type changed",
          "slots": "the slots changed", "devices": "the devices changed", "placement": "the placement changed"}


HEADLINE_SHARE = 0.25  # a cause the headline names explains at least this share of the gap


def top_cause(causes: tuple[SlowdownCause, ...]) -> SlowdownCause | None:
    """The cause the headline names: the largest named share of at least ``HEADLINE_SHARE``, else the client's view
    of a speed the server did reach."""
    named = [c for c in causes if c.code not in ("unexplained", "client_slower") and (c.share or 0) >= HEADLINE_SHARE]
    if named:
        return max(named, key=lambda c: c.share or 0.0)
    return next((c for c in causes if c.code == "client_slower"), None)


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text


def _connection(s: Snapshot) -> Verdict | None:
    """The verdict of a connection that is not simply read (None: connected, or a replay)."""
    st = s.connection.status
    level = status_level(st)
    if level is None:
        return None
    reason = (s.connection.reason or "").strip().rstrip(".")
    if st is ConnectionStatus.UNREACHABLE:
        sentence = (f"{_cap(reason) or 'Cannot reach the server'}. Is the server running? kvmon once --list finds the "
                    "servers on this machine")
    elif st is ConnectionStatus.TIMEOUT:
        sentence = f"Not answering: {reason or 'the server took too long'}; kvmon keeps asking"
    elif st is ConnectionStatus.AUTH_REJECTED:
        sentence = "API key rejected: set the server's key in Settings (Ctrl+,), with --api-key or KVMON_API_KEY"
    elif st is ConnectionStatus.BAD_URL:
        sentence = f"{_cap(reason) or 'Bad server URL'}: give the server's URL, like http://127.0.0.1:8080"
    elif st is ConnectionStatus.BAD_RESPONSE:
        sentence = f"Unexpected answer from the server: {reason or 'not one kvmon can read'}"
    elif st is ConnectionStatus.LOADING:
        sentence = _loading(reason)
    elif st is ConnectionStatus.SLEEPING:
        sentence = "Asleep: the model is unloaded while idle and loads again on the next request"
    elif st is ConnectionStatus.CONNECTING:
        sentence = f"Connecting to {s.url}…" if s.url else "Connecting…"
    else:
        sentence = "Paused: kvmon does not poll until you resume (Space)"
    return Verdict(VerdictLevel.of(level), STATUS_STATES.get(st, st.value), sentence, CONNECTION)


def _loading(reason: str) -> str:
    """"Loading gemma-3-12b (42 %): its speed shows once it answers", from the reason a loading server gives."""
    named = _LOADING.match(reason)
    if named is None:
        return f"Loading: {reason}" if reason and "load" in reason.lower() and not _BARE_LOADING.match(reason) else \
            "Loading the model: its speed shows once it answers"
    progress = f" ({named.group(2)})" if named.group(2) else ""
    return f"Loading {named.group(1)}{progress}: its speed shows once it answers"


def _worst_alert(alerts: tuple[Alert, ...]) -> Alert | None:
    """The worst condition among the alerts (advice and the connection's own line left out), ties in table order."""
    conditions = [a for a in alerts if a.code not in ADVICE and a.code != CONNECTION]
    order = {c: i for i, c in enumerate(ALERT_STATES)}
    return min(conditions, key=lambda a: (-a.level.rank, order.get(a.code, len(order))), default=None)


def _depth(s: Snapshot) -> str:
    return f" at {fmt_tokens(s.context_tokens)}" if s.context_tokens is not None else ""


def _activity(s: Snapshot, where: str = "") -> Verdict:
    """What the server is doing when nothing is wrong (``where``: " on the CPU" when it decodes there)."""
    act = s.activity or Activity.UNKNOWN
    state = ACTIVITY_STATES.get(act, "Connected")
    dec, ceil = s.decode_tok_s, s.ceiling_tok_s
    if act is Activity.DECODING and dec is not None:
        if s.extra.get("placement") == UNSEEN:
            return Verdict(VerdictLevel.INFO, state, f"Decoding at {fmt_tok_s(dec)} on a device kvmon cannot see: "
                           "where the model runs and its ceiling are unknown", "decoding")
        if s.ceiling_suspect is not None:
            return Verdict(VerdictLevel.INFO, state, f"Decoding at {fmt_tok_s(dec)}, faster than the computed ceiling "
                           f"of {fmt_tok_s(ceil)}: {suspect_words(s.ceiling_suspect.input)} is likely wrong",
                           "decoding")
        if s.efficiency is not None:
            on = f"Decoding{where} at " if where else ""
            said = f"{on}{fmt_percent(s.efficiency)} of the memory-bus ceiling{_depth(s)}"
            cause = top_cause(s.slowdown_causes)
            if cause is not None:  # why it runs below the ceiling, when one cause explains enough of the gap
                return Verdict(VerdictLevel.INFO, state, f"{said} — {cause.summary}", cause.code)
            return Verdict(VerdictLevel.OK, state, said, "decoding")
        why = s.reasons.get("ceiling_tok_s")
        return Verdict(VerdictLevel.OK, state, f"Decoding{where} at {fmt_tok_s(dec)}; the ceiling is unknown"
                       + (f": {why}" if why else ""), "decoding")
    if act is Activity.IDLE:
        # the ceiling as the big number's line says it: one figure, one way, on one screen
        there = f": up to {fmt_tok_s(ceil)} there" if ceil is not None and s.context_tokens is not None else ""
        if s.context_tokens is None:
            return Verdict(VerdictLevel.OK, state, f"Idle{where}: no conversation in context", "idle")
        return Verdict(VerdictLevel.OK, state, f"Idle{where}{_depth(s)}{there}", "idle")
    if act is Activity.PROCESSING:
        if s.prefill_tok_s is not None:
            return Verdict(VerdictLevel.OK, state, f"Reading a prompt{where} at {fmt_tok_s(s.prefill_tok_s)}",
                           "processing")
        return Verdict(VerdictLevel.OK, "Starting", f"A request started{where}: its speed shows at the next poll",
                       "processing")
    if act is Activity.LOADING:
        return Verdict(VerdictLevel.INFO, state, "Loading the model: its speed shows once it answers", "loading")
    why = s.reasons.get("decode_tok_s")
    return Verdict(VerdictLevel.OK, state, f"Connected; no live speed{': ' + why if why else ''}", "unknown")


def decide(s: Snapshot) -> Verdict:
    """The verdict of one Snapshot: the worse of its connection and its worst condition, else its activity."""
    conn = _connection(s)
    alert = _worst_alert(s.alerts)
    if alert is not None and (conn is None or VerdictLevel.of(alert.level).rank > conn.level.rank):
        if alert.code == "cpu_only" and alert.level.rank == 0 and s.server_read:
            return replace(_activity(s, " on the CPU"), level=VerdictLevel.INFO, state=ALERT_STATES["cpu_only"],
                           cause=alert.code)
        return Verdict(VerdictLevel.of(alert.level), ALERT_STATES.get(alert.code, "Warning"),
                       alert.headline or alert.message, alert.code)
    if conn is not None:
        return conn
    return _activity(s)


def decided(s: Snapshot) -> Snapshot:
    """``s`` with its verdict (again: after its alerts or its serving view changed)."""
    return replace(s, verdict=decide(s))


class DecodeMemory:
    """The last decode speed measured and the last one before the current regime, of one model (forgotten with it).

    The one before is the last measured point (``kvmon.core.points.measured_point``: one conversation decoding at a
    known depth), as the speed-vs-context plot says it where the regime began ("70 → 7.2 tok/s"): one figure."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._model: object = None
        self._regime: int | None = None
        self._last: LastDecode | None = None
        self._last_point: LastDecode | None = None
        self._before: LastDecode | None = None

    def update(self, model: object, regime: int | None, decode: float | None, t_monotonic: float, t_wall: float,
               context_tokens: int | None, point_tok_s: float | None = None
               ) -> tuple[LastDecode | None, LastDecode | None]:
        """This poll's speed (None: nothing decoded) and its measured point's (None: none); (the last measured, the
        last point before this regime)."""
        if model is not None and model != self._model:  # None: nothing names a model this poll, nothing changes
            if self._model is not None:
                self.reset()
            self._model = model
        if regime != self._regime:
            if self._regime is not None and self._last_point is not None:
                self._before = self._last_point
            self._regime = regime
        if decode is not None:
            self._last = LastDecode(decode, t_monotonic, t_wall, context_tokens)
        if point_tok_s is not None:
            self._last_point = LastDecode(point_tok_s, t_monotonic, t_wall, context_tokens)
        return self._last, self._before


def before_what(regime_cause: str | None) -> str | None:
    """What began the current regime, as a speed's "before" says it (None: nothing to compare with)."""
    return BEFORE.get(regime_cause or "")
