"""Counter → rate: live decode and prefill tok/s from successive readings, smoothed, reset-safe.

llama-server's generation counters move only when a request ends and its tok/s gauges reset on every
scrape, so the live rates come from per-slot counters in /slots (``n_decoded``, tokens held) between
polls. A counter that falls (new request, server restart) restarts its rate; an idle slot gives
``None`` ("no data"), never a measured 0; a rise faster than physics allows (``kvmon.core.bounds``: a wrapped or
zigzagging counter) restarts it too, and the sample says why there is no rate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kvmon.core.bounds import MAX_DECODE_TOK_S, MAX_PREFILL_TOK_S
from kvmon.core.readings import RateSource, ServerReading, SlotReading

# the step counters of a server that counts tokens as its engine makes them (vLLM), by their exposed names
STEP_GENERATED = "generation_tokens_total"
# per finished request, summed: prompt tokens computed and the seconds their prefill took (vLLM's histograms)
PREFILL_TOKENS_SUM = "request_prefill_kv_computed_tokens_sum"
PREFILL_SECONDS_SUM = "request_prefill_time_seconds_sum"
# the source of a decode speed taken from the replies that ended between two polls (their own timing, at the depths
# they ran at, not this poll's)
ENDED_REPLIES: RateSource = "replies"
DEFAULT_TAU_S = 2.0  # EWMA time constant: steady within a few polls, still follows a slowdown
MAX_GAP_S = 30.0  # a longer gap between polls (paused, suspended) restarts the rates


class CounterRate:
    """Rate of a monotonically increasing counter with time-aware EWMA smoothing.

    ``update(t, value)`` returns the smoothed rate per second, or None until two samples exist. A
    falling counter or a gap longer than ``max_gap_s`` restarts it; ``None`` input also restarts it; so does a
    rise faster than ``max_rate`` per second (``rejected`` then holds that impossible rate).
    """

    def __init__(self, tau_s: float = DEFAULT_TAU_S, max_gap_s: float = MAX_GAP_S,
                 max_rate: float | None = None) -> None:
        self.tau_s = tau_s
        self.max_gap_s = max_gap_s
        self.max_rate = max_rate
        self.rejected: float | None = None  # the last interval's rate, when it was past max_rate
        self._t: float | None = None
        self._v: float | None = None
        self.rate: float | None = None
        self.last_delta: float | None = None  # counter change over the last interval
        self.last_dt: float | None = None  # length of that interval, seconds

    def reset(self) -> None:
        """Forget history: the next update only sets the baseline."""
        self._t = self._v = self.rate = self.last_delta = self.last_dt = None

    def update(self, t: float, value: float | None) -> float | None:
        """Take a sample at monotonic time ``t``; returns the smoothed rate or None."""
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            self.reset()
            return None
        if self._t is None or self._v is None:
            self._t, self._v = t, value
            return None
        dt = t - self._t
        if dt <= 0:
            return self.rate
        dv = value - self._v
        self._t, self._v = t, value
        if dv < 0 or dt > self.max_gap_s:  # counter reset (restart / new request) or a long pause
            self.rate = self.last_delta = self.last_dt = None
            return None
        inst = dv / dt
        if self.max_rate is not None and inst > self.max_rate:
            self.rate = self.last_delta = self.last_dt = None
            self.rejected = inst
            return None
        self.rejected = None
        self.last_delta, self.last_dt = dv, dt
        if self.rate is None:
            self.rate = inst
        else:
            alpha = 1.0 - math.exp(-dt / self.tau_s) if self.tau_s > 0 else 1.0
            self.rate += alpha * (inst - self.rate)
        return self.rate


@dataclass(frozen=True)
class RateSample:
    """Live rates at one poll; None = no data (idle, first poll, just reset), never a guessed 0."""

    decode_tok_s: float | None
    prefill_tok_s: float | None
    per_slot_decode_tok_s: dict[int, float | None] = field(default_factory=dict)
    decode_rate_source: RateSource | None = None
    reasons: dict[str, str] = field(default_factory=dict)  # why a rate is missing, when it was impossible


def implausible(what: str, rate: float, bound: float) -> str:
    """The reason for a rate withheld because it is past its physical bound."""
    return f"{what} of {rate:.3g} tok/s is past any physical bound ({bound:,.0f} tok/s): a counter jumped; withheld"


@dataclass
class _SlotState:
    id_task: int | None
    decode: CounterRate
    held: CounterRate  # tokens held (prompt + generated): growth with no decode growth is prefill
    last_decoded: int | None = None


class SlotRateTracker:
    """Turns successive ServerReadings into live decode/prefill tok/s per slot and in total."""

    def __init__(self, tau_s: float = DEFAULT_TAU_S) -> None:
        self.tau_s = tau_s
        self.reset()

    def reset(self) -> None:
        """Forget everything (another server, or a restart)."""
        tau_s = self.tau_s
        self._slots: dict[int, _SlotState] = {}
        self._reasons: dict[str, str] = {}
        self._n_decode = CounterRate(tau_s, max_rate=MAX_DECODE_TOK_S)
        self._prompt_tokens = CounterRate(0.0)
        self._prompt_seconds = CounterRate(0.0)
        self._predicted = CounterRate(0.0)  # tokens of the requests that ended (moves when one ends)
        self._predicted_seconds = CounterRate(0.0)  # the seconds those requests spent generating, by the server
        self._active: set[int] = set()  # the slots processing at the last poll
        self._generating = False  # a prompt was read since the last request ended: n_decode_total counts tokens
        # a server that counts every engine step's tokens (vLLM): a batch's generation is bounded like batched
        # prompt processing, not like one conversation's decode
        self._generated = CounterRate(tau_s, max_rate=MAX_PREFILL_TOK_S)
        self._prefill_tokens = CounterRate(0.0)
        self._prefill_seconds = CounterRate(0.0)
        self._was_running = False
        self._last_t: float | None = None

    def update(self, reading: ServerReading) -> RateSample:
        """Feed one reading; returns the live rates it allows."""
        t = reading.t_monotonic
        if self._last_t is not None and (t <= self._last_t - 1e-9 or t - self._last_t > MAX_GAP_S):
            self.reset()
        self._last_t = t

        per_decode: dict[int, float | None] = {}
        per_prefill: dict[int, float | None] = {}
        self._reasons = {}
        seen: set[int] = set()
        # the slots that held a request at some time in the interval: processing at either end, or a new task
        active, self._active = set(self._active), {sl.id for sl in reading.slots if sl.processing}
        for slot in reading.slots:
            seen.add(slot.id)
            known = self._slots.get(slot.id)
            if slot.processing or (known is not None and known.id_task != slot.id_task):
                active.add(slot.id)
            d, p = self._update_slot(t, slot)
            per_decode[slot.id], per_prefill[slot.id] = d, p
        for gone in set(self._slots) - seen:
            del self._slots[gone]

        decode = _sum(per_decode.values())
        prefill = _sum(per_prefill.values())
        if decode is not None and decode > MAX_DECODE_TOK_S:  # each slot plausible, their sum not (10,000 slots)
            self._reasons["decode_tok_s"] = implausible(f"the decode of {len(reading.slots):,} slots together",
                                                        decode, MAX_DECODE_TOK_S)
            decode = None
        source: RateSource | None = None
        if reading.slots:  # Ollama's child llama-server or a proxy also report slots: keep their name
            source = reading.live_rate_source if reading.live_rate_source not in (None, "metrics") else "slots"

        metrics = reading.metrics or {}
        if STEP_GENERATED in metrics and not reading.slots:
            return self._step_rates(t, metrics, reading.requests_running)
        # Counter-based fallbacks. n_decode_total counts llama_decode calls: with one slot that is one
        # generated token per call, and one per batch of a prompt, so it only stands in for /slots then, and only over
        # an interval that was all generation (a long prompt's batches are not tokens: ~5 "tok/s" while it is read).
        self._prompt_tokens.update(t, metrics.get("prompt_tokens_total"))
        self._prompt_seconds.update(t, metrics.get("prompt_seconds_total"))
        nd = self._n_decode.update(t, metrics.get("n_decode_total"))
        self._predicted.update(t, metrics.get("tokens_predicted_total"))
        self._predicted_seconds.update(t, metrics.get("tokens_predicted_seconds_total"))
        if self._n_decode.rejected is not None and not reading.slots:
            self._reasons["decode_tok_s"] = implausible("n_decode_total's rate", self._n_decode.rejected,
                                                        MAX_DECODE_TOK_S)
        generation = not reading.slots and self._all_generation(t, metrics, reading.requests_running)
        if decode is None and not reading.slots and (reading.total_slots or 0) <= 1:
            if generation and nd is not None and (self._n_decode.last_delta or 0) > 0:
                decode, source = nd, "metrics"
            elif nd is not None:  # prompt batches (or a request's end) in this interval: the rate starts again
                self._n_decode.reset()
                self._n_decode.update(t, metrics.get("n_decode_total"))
        busy = any(s.processing for s in reading.slots) or not reading.slots
        one_stream = len(active) == 1 if reading.slots else (reading.total_slots or 0) <= 1 and bool(
            reading.requests_running)
        if decode is None and busy and one_stream:  # a reply ended in between, another runs: the ended one's speed
            # (llama-server: the tokens of the replies that ended over the seconds it spent generating them)
            ended = self._timed(self._predicted, self._predicted_seconds, "decode_tok_s", "the ended replies' rate",
                                MAX_DECODE_TOK_S)
            if ended is not None:
                decode, source = ended, ENDED_REPLIES
        if prefill is None and busy:  # all slots idle: no live data, whatever finished in between
            # the server's own prompt timing over the prompts read in the interval
            prefill = self._timed(self._prompt_tokens, self._prompt_seconds, "prefill_tok_s",
                                  "the prompt counters' rate", MAX_PREFILL_TOK_S)
        return RateSample(
            decode_tok_s=decode,
            prefill_tok_s=prefill,
            per_slot_decode_tok_s=per_decode,
            decode_rate_source=source,
            reasons=self._reasons,
        )

    def _all_generation(self, t: float, metrics: Mapping[str, float], running: int | None) -> bool:
        """Whether the interval just ended was all generation, by llama-server's counters: its prompt counter moves
        when a prompt has been read (decoding begins), its generated-token counter when a request ends. So a
        request generates from the first until the second, and an interval in which either moved held a prompt's
        batches or an end. ``running``: the server's count of requests being processed, where it says it."""
        was = self._generating
        predicted = metrics.get("tokens_predicted_total")
        if self._prompt_tokens.last_delta is None or (predicted is not None and self._predicted.last_delta is None):
            self._generating = False  # the counters' first reading, a restart or a long gap: the phase is not known
            return False
        read = (self._prompt_tokens.last_delta or 0) > 0
        ended = (self._predicted.last_delta or 0) > 0
        if read:  # a prompt read since the last poll: its request generates now, unless nothing runs any more
            self._generating = running is None or running > 0
        elif ended or running == 0:
            self._generating = False
        return was and self._generating and not read and not ended

    def _timed(self, tokens: CounterRate, seconds: CounterRate, field: str, what: str, bound: float) -> float | None:
        """Tokens over seconds, as the server timed the requests they belong to, over the interval just gone; None
        when neither moved, or past ``bound`` (with the reason under ``field``)."""
        dtok, dsec = tokens.last_delta, seconds.last_delta
        if not (dtok and dsec and dtok > 0 and dsec > 0):
            return None
        rate = dtok / dsec
        if rate > bound:
            self._reasons[field] = implausible(what, rate, bound)
            return None
        return rate

    def _step_rates(self, t: float, metrics: Mapping[str, float], running: int | None) -> RateSample:
        """Decode from a counter that moves every engine step (vLLM's generated tokens): its rate over an interval
        with a request running at both ends (one that began or ended inside would average in idle or prefill
        time), None while it stands (idle), restarted when it falls. Prefill from the server's own timing of the
        requests that finished in the interval (prompt tokens computed / seconds of prefill)."""
        was_running, self._was_running = self._was_running, bool(running)
        if not (was_running and running):
            self._generated.rate = None
        rate = self._generated.update(t, metrics.get(STEP_GENERATED))
        if not (was_running and running):
            rate = None
        if self._generated.rejected is not None:
            self._reasons["decode_tok_s"] = implausible(f"{STEP_GENERATED}'s rate", self._generated.rejected,
                                                        MAX_PREFILL_TOK_S)
        decode = rate if rate is not None and (self._generated.last_delta or 0) > 0 else None
        if decode is None:
            self._generated.rate = None  # the next movement starts a fresh average, not one blended with idle time
        self._prefill_tokens.update(t, metrics.get(PREFILL_TOKENS_SUM))
        self._prefill_seconds.update(t, metrics.get(PREFILL_SECONDS_SUM))
        prefill = self._timed(self._prefill_tokens, self._prefill_seconds, "prefill_tok_s", "the prefill timing's rate",
                              MAX_PREFILL_TOK_S)
        return RateSample(decode_tok_s=decode, prefill_tok_s=prefill, reasons=self._reasons,
                          decode_rate_source="metrics" if decode is not None else None)

    def _update_slot(self, t: float, slot: SlotReading) -> tuple[float | None, float | None]:
        st = self._slots.get(slot.id)
        if st is None or st.id_task != slot.id_task:
            st = _SlotState(slot.id_task, CounterRate(self.tau_s, max_rate=MAX_DECODE_TOK_S),
                            CounterRate(self.tau_s, max_rate=MAX_PREFILL_TOK_S))
            self._slots[slot.id] = st
        if not slot.processing:
            st.decode.reset()
            st.held.reset()
            return None, None
        prompt_only = not slot.n_decoded and not st.last_decoded  # no token generated at either end: all prompt
        if slot.n_decoded and not st.last_decoded:
            # decoding began since the last poll: that interval also held the prompt's processing, so its
            # average would understate decode speed; measure from this sample on
            st.decode.reset()
        st.last_decoded = slot.n_decoded
        decode_rate = st.decode.update(t, slot.n_decoded)
        if st.decode.rejected is not None:
            self._reasons["decode_tok_s"] = implausible(f"slot {slot.id}'s decode rate", st.decode.rejected,
                                                        MAX_DECODE_TOK_S)
        d_decoded = st.decode.last_delta
        if decode_rate is not None and not d_decoded:
            # nothing generated since the last poll: prefill running, or /slots lagging; no decode data
            decode_rate = None
            st.decode.rate = None
        st.held.update(t, slot.context_tokens)
        if st.held.rejected is not None:
            self._reasons["prefill_tok_s"] = implausible(f"slot {slot.id}'s prompt rate", st.held.rejected,
                                                         MAX_PREFILL_TOK_S)
        prefill: float | None = None
        grown, dt = st.held.last_delta, st.held.last_dt
        if grown is not None and dt and prompt_only and not slot.context_estimated:
            # tokens held grew while nothing was generated, from one poll to the next: the prompt is being processed.
            # An interval in which decoding began also held the first tokens and the wait before the prompt's last
            # batch: the server's own prompt timing (/metrics) says that one. A depth kvmon put together (a proxied
            # stream) grows by what the proxy learns, not by what the server processes.
            prefill = grown / dt if grown > 0 else None
        return decode_rate, prefill


def _sum(values: Iterable[float | None]) -> float | None:
    nums = [v for v in values if v is not None]
    return sum(nums) if nums else None
