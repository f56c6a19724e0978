"""Latency per reply: time to first token, the prompt's prefill rate and the inter-token latency of each reply, and
their percentiles over the session, from what the server itself timed.

Three ways in, best first. A finished request's own timings (``ServerReading.last_request``: kvmon's proxy, Ollama's
and LM Studio's final chunk). llama-server's counters, which move when a prompt has been processed (``prompt_*``)
and when a reply ends (``tokens_predicted_*``): each rise of the generation counters is a reply, with the prefill
counted since the last one as its time to first token. vLLM's histograms (``time_to_first_token_seconds``,
``inter_token_latency_seconds``): each poll's rise of their sums over the rise of their counts is the mean of the
requests that finished meanwhile, kept as one observation per poll (vLLM's own buckets are not read). Times are the
server's: the network and a request's wait in a queue before its prompt is processed are not in them.

With a draft context (a draft model, MTP layers) llama-server's ``prompt_seconds_total`` leaves out the drafter's own
prompt processing, which the reply's ``timings.prompt_ms`` holds (measured on b11549: 10–25 % more): times to first
token from the counters are then lower bounds, and said so; a request's own timings (kvmon's proxy) are whole.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass

from kvmon.core.analysis.notes import Notes
from kvmon.core.analysis.speeds import request_running
from kvmon.core.readings import ServerReading
from kvmon.core.snapshot import LatencyView

MAX_REPLIES = 4096  # the session's percentiles are over this many last replies
# histogram bounds (seconds) for the exporter: time to first token and inter-token latency
TTFT_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
ITL_BUCKETS_S = (0.005, 0.01, 0.02, 0.04, 0.06, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5)
VLLM_TTFT = ("time_to_first_token_seconds",)
VLLM_ITL = ("inter_token_latency_seconds", "time_per_output_token_seconds")
DRAFT_PREFILL_LEFT_OUT = ("llama-server's prompt counter leaves out the draft's own prompt processing (its reply "
                          "timings have it: 10-25 % more measured): times to first token from the counters are lower "
                          "bounds while it drafts with a draft model or MTP layers; through kvmon proxy each reply's "
                          "own timing is read")
# A reply that ended while another request ran (one after another within a poll, or side by side), or more tokens read
# and generated between two polls than one reply per slot holds, show that the counters' rise between two polls may
# hold several replies: for this long after, what they add up is not one reply.
SEVERAL_MEMORY_S = 60.0
SEVERAL_REPLIES = ("replies follow one another faster than kvmon polls (one ended while another was processed, or "
                   "more tokens were read and generated between two polls than one reply per slot holds): "
                   "what the server's counters add up between two polls may be several replies, so their times to "
                   "first token are not split per reply and their count is a lower bound (per-token times stay "
                   "true); through kvmon proxy each reply is timed on its own")


@dataclass(frozen=True)
class Reply:
    """One finished reply as the server timed it; None where it did not say."""

    ttft_s: float | None = None  # prefill, as the server timed it (its time to first token)
    prompt_tokens: float | None = None  # prompt tokens computed (not served from the cache)
    itl_s: float | None = None  # mean seconds per generated token
    generated_tokens: float | None = None
    generate_s: float | None = None  # seconds spent generating
    several: bool = False  # what the counters added up between two polls, which may be several replies


class _Series:
    """One latency over the session: the last MAX_REPLIES values in arrival order and kept sorted (a percentile is
    one index; sorting 4,096 values per reply cost more than the rest of the poll's analysis), and the sum, count and
    cumulative bucket counts (Prometheus ``le``, the last +Inf) of every value since the session began."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.arrived: deque[float] = deque()
        self.ordered: list[float] = []
        self.sum, self.n = 0.0, 0
        self.counts = [0] * (len(bounds) + 1)

    def add(self, value: float) -> None:
        self.arrived.append(value)
        bisect.insort(self.ordered, value)
        if len(self.arrived) > MAX_REPLIES:
            del self.ordered[bisect.bisect_left(self.ordered, self.arrived.popleft())]
        self.sum += value
        self.n += 1
        for i in range(bisect.bisect_left(self.bounds, value), len(self.counts)):
            self.counts[i] += 1

    def percentile(self, q: float) -> float | None:
        """Nearest-rank percentile of the kept values (None for none)."""
        if not self.ordered:
            return None
        return self.ordered[max(0, min(len(self.ordered) - 1, math.ceil(q * len(self.ordered)) - 1))]


def _held(r: ServerReading) -> tuple[int, int] | None:
    """The tokens the slots hold now (a reply's prompt and its tokens but the last, measured on b11549) and how many
    slots; None without slots or where one does not say."""
    if not r.slots or any(sl.context_tokens is None for sl in r.slots):
        return None
    return sum(sl.context_tokens or 0 for sl in r.slots), len(r.slots)


class LatencyTracker:
    """The session's replies: each new one from this poll's reading, and the percentiles over them."""

    def __init__(self) -> None:
        self._ttft, self._itl = _Series(TTFT_BUCKETS_S), _Series(ITL_BUCKETS_S)
        self._last: Reply | None = None
        self._counters: dict[str, float] | None = None
        self._pending_prefill: tuple[float, float] | None = None  # (seconds, tokens) since the last reply
        self._last_request_end: float | None = None
        self._source: str | None = None
        self._view: LatencyView | None = None  # made again only when a reply is added (it sorts the replies)
        self._lower_bound = False  # a time to first token in the session came from the counters while drafting
        self._several_t: float | None = None  # when a reply last ended while another request was processed
        self._several = False  # a sample of the session may hold several replies: the count is a lower bound
        self.added: Reply | None = None  # the reply this poll added (its energy is counted), None when none ended

    def _add(self, reply: Reply, source: str) -> None:
        self._last, self._source, self._view, self.added = reply, source, None, reply
        self._several = self._several or reply.several
        if reply.ttft_s is not None and reply.ttft_s >= 0:
            self._ttft.add(reply.ttft_s)
        if reply.itl_s is not None and reply.itl_s > 0:
            self._itl.add(reply.itl_s)

    def _from_request(self, r: ServerReading) -> bool:
        req = r.last_request
        key = req.request_id if req is not None and req.request_id is not None else (req.t_end if req else None)
        if req is None or key == self._last_request_end:
            return req is not None
        self._last_request_end = key
        itl = (req.predicted_seconds / req.predicted_tokens
               if req.predicted_seconds and req.predicted_tokens else None)
        computed = req.reread_tokens if req.reread_tokens is not None else (
            (req.prompt_tokens - (req.cached_tokens or 0)) if req.prompt_tokens is not None else None)
        self._add(Reply(ttft_s=req.prompt_seconds, prompt_tokens=computed, itl_s=itl,
                        generated_tokens=req.predicted_tokens, generate_s=req.predicted_seconds), "request timings")
        return True

    def _rises(self, m: dict[str, float], names: tuple[str, ...]) -> dict[str, float] | None:
        """Each counter's rise since the last poll; None when one fell (the server restarted) or is new."""
        last = self._counters
        if last is None or any(n not in last for n in names):
            return None
        rises = {n: m[n] - last[n] for n in names}
        return None if any(v < 0 for v in rises.values()) else rises

    def _from_llama_counters(self, m: dict[str, float], t: float, running: bool, held: tuple[int, int] | None
                             ) -> None:
        """The reply that ended since the last poll, from the counters' rises. ``running``: a request is processed
        at this poll, so one ended while another ran, and this interval's prompts may be the other's. ``held``: the
        tokens the slots hold now and how many slots (one reply per slot adds at most that many, plus one each)."""
        names = ("prompt_seconds_total", "prompt_tokens_total", "tokens_predicted_seconds_total",
                 "tokens_predicted_total")
        if not all(n in m for n in names):
            return
        d = self._rises(m, names)
        if d is None:
            self._pending_prefill = None
            return
        if d["prompt_tokens_total"] > 0:  # prompts processed since the last poll (their time to first token)
            s, n = self._pending_prefill or (0.0, 0.0)
            self._pending_prefill = (s + d["prompt_seconds_total"], n + d["prompt_tokens_total"])
        if d["tokens_predicted_total"] > 0 and d["tokens_predicted_seconds_total"] > 0:  # a reply ended
            pre = self._pending_prefill
            self._pending_prefill = None
            # more prompt and generated tokens than the slots hold: more replies than slots came and went
            more = held is not None and d["prompt_tokens_total"] + d["tokens_predicted_total"] > held[0] + held[1]
            if running or more:
                self._several_t = t
            tokens, seconds = d["tokens_predicted_total"], d["tokens_predicted_seconds_total"]
            if self._several_t is not None and t - self._several_t <= SEVERAL_MEMORY_S:
                # one reply or several: their mean time per token is true, their sums are no one reply's times
                self._add(Reply(itl_s=seconds / tokens, generated_tokens=tokens, several=True), "server counters")
                return
            self._add(Reply(ttft_s=pre[0] if pre else None, prompt_tokens=pre[1] if pre else None,
                            itl_s=seconds / tokens, generated_tokens=tokens, generate_s=seconds), "server counters")

    def _from_vllm_histograms(self, m: dict[str, float]) -> None:
        means: dict[str, float | None] = {}
        for key, candidates in (("ttft", VLLM_TTFT), ("itl", VLLM_ITL)):
            means[key] = None
            for name in candidates:
                pair = (f"{name}_sum", f"{name}_count")
                if all(p in m for p in pair):
                    d = self._rises(m, pair)
                    if d is not None and d[pair[1]] > 0:
                        means[key] = d[pair[0]] / d[pair[1]]
                    break
        if means["ttft"] is not None or means["itl"] is not None:
            self._add(Reply(ttft_s=means["ttft"], itl_s=means["itl"]), "vLLM histograms (means per poll)")

    def update(self, r: ServerReading, *, drafting: bool = False) -> tuple[LatencyView | None, Notes]:
        """Take this poll's new replies; the session's view (None before the first reply). ``drafting``: the server
        has a draft context, whose prompt processing its prompt counter leaves out."""
        m = dict(r.metrics)
        self.added = None
        if not self._from_request(r):
            if "tokens_predicted_total" in m:
                self._from_llama_counters(m, r.t_monotonic, bool(request_running(r)), _held(r))
                if drafting and self.added is not None and self.added.ttft_s is not None and not self._lower_bound:
                    self._lower_bound, self._view = True, None
            elif any(f"{n}_count" in m for n in (*VLLM_TTFT, *VLLM_ITL)):
                self._from_vllm_histograms(m)
        self._counters = m
        reasons: dict[str, str] = {"latency.ttft": DRAFT_PREFILL_LEFT_OUT} if self._lower_bound else {}
        if self._several:
            reasons["latency.replies"] = SEVERAL_REPLIES
        return self.view(), Notes(reasons=reasons)

    def view(self) -> LatencyView | None:
        if self._last is None or self._view is not None:
            return self._view
        ttft, itl = self._ttft, self._itl
        last = self._last
        prefill = (last.prompt_tokens / last.ttft_s if last.prompt_tokens and last.ttft_s else None)
        self._view = LatencyView(
            replies=max(ttft.n, itl.n), source=self._source,
            ttft_last_s=last.ttft_s, ttft_p50_s=ttft.percentile(0.5), ttft_p95_s=ttft.percentile(0.95),
            itl_last_s=last.itl_s, itl_p50_s=itl.percentile(0.5), itl_p95_s=itl.percentile(0.95),
            itl_mean_s=itl.sum / itl.n if itl.n else None,
            last_prompt_tokens=int(last.prompt_tokens) if last.prompt_tokens is not None else None,
            last_prefill_tok_s=prefill, last_generate_s=last.generate_s,
            ttft_buckets=tuple(ttft.counts), ttft_sum_s=ttft.sum, ttft_count=ttft.n,
            itl_buckets=tuple(itl.counts), itl_sum_s=itl.sum, itl_count=itl.n,
            ttft_lower_bound=self._lower_bound, replies_at_least=self._several,
        )
        return self._view
