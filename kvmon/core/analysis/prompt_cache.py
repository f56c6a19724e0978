"""Prompt-cache forensics: per reply, the prompt tokens the server read again against those it reused from its cache
and the seconds the reading cost; the misses (a long conversation's prompt read again whole); what made prompts
change, from ``kvmon proxy``; and the next turn's time to first token at this depth.

Where the figures come from, best first:

- the server's own counters, which count every client's prompts exactly (the backend names them: llama-server's
  ``prompt_tokens_total`` (read), ``prompt_tokens_cached_total`` (reused) and ``prompt_seconds_total``; vLLM's
  prefix-cache ``queries`` and ``hits`` in tokens, and its prefill time);
- each reply's own timings through ``kvmon proxy`` (llama-server's ``timings.cache_n``/``prompt_n``/``prompt_ms``;
  OpenAI-style ``usage.prompt_tokens_details.cached_tokens``; Ollama's final chunk, whose ``prompt_eval_count``
  holds the cached tokens and whose duration does not: the tokens Ollama's llama-server child shows reused in its
  ``/slots`` while the prompt was read are taken out).

The next turn's wait: each read's seconds per token read, against the depth it was read at, fitted as a line; the
next turn reads what the recent turns added (or, while the cache keeps missing, the whole context) at this depth.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import asdict, dataclass, replace
from typing import get_args

from kvmon.core.alert_types import AlertThresholds
from kvmon.core.backend import backend_of
from kvmon.core.readings import ServerReading
from kvmon.core.snapshot import PromptCacheSource, PromptCacheView, PromptChange, PromptChangeKind, PromptMiss

FIT_READS = 32  # the last reads the next turn's wait is fitted on
MIN_READ_TOKENS = 16  # a read of fewer tokens times the server's overhead, not its reading
COUNTERS: PromptCacheSource = "the server's counters"
TIMINGS: PromptCacheSource = "each reply's timings"


@dataclass(frozen=True)
class Read:
    """Prompt tokens read and reused, and the seconds, since the last one counted (one reply, or a poll's worth)."""

    reread_tokens: int | None
    reused_tokens: int | None
    seconds: float | None
    t: float
    t_wall: float


class PromptCacheTracker:
    """The session's prompt reading: fed each poll's reading, it answers the ``PromptCacheView`` (None until a
    prompt was counted)."""

    def __init__(self, thresholds: AlertThresholds | None = None) -> None:
        self.thresholds = thresholds or AlertThresholds()
        self.reset()

    def reset(self) -> None:
        self._counters: dict[str, float] | None = None
        self._last_request_end: float | None = None  # the last reply counted (the proxy's id, else its end)
        # the tasks seen processing, in order, with the tokens each showed reused (Ollama's llama-server child): a reply
        # that ends is the oldest of them no longer processing
        self._tasks: dict[int | None, int] = {}
        self._held = 0  # the deepest context seen since the last read counted (what the cache could have reused)
        self._restarted = False  # the server restarted since: what it held before is gone
        self._fit: deque[tuple[float, float]] = deque(maxlen=FIT_READS)  # (depth at mid-read, seconds per token)
        self._turns: deque[int] = deque(maxlen=FIT_READS)  # tokens each hit read (what a turn adds)
        self._totals: deque[int] = deque(maxlen=FIT_READS)  # each prompt's tokens (read and reused)
        self._view = PromptCacheView()
        self._counted = False

    def restarted(self) -> None:
        """The server (re)loads: its prompt cache goes with the process, so the next prompt is read whole without a
        miss, and its counters start again."""
        self._held, self._restarted, self._counters = 0, True, None

    # ---------------------------------------------------------------------------------------------- reading

    def _from_counters(self, r: ServerReading) -> Read | bool | None:
        """The counters' rise since the last poll as one read; None when nothing rose; False: no such counters."""
        names = backend_of(r.backend).prompt_counters
        if names is None or names[0] not in r.metrics or names[1] not in r.metrics:
            return False
        now = {n: r.metrics[n] for n in names[:3] if n and n in r.metrics}
        last, self._counters = self._counters, now
        if last is None or any(now[n] < last.get(n, 0.0) for n in now):  # first poll, or a restart
            if last is not None:
                self.restarted()
                self._counters = now
            return None
        read_n, reused_n, seconds_n, includes = names
        d_read, d_reused = now[read_n] - last[read_n], now[reused_n] - last[reused_n]
        if d_read <= 0 and d_reused <= 0:
            return None
        reread = d_read - d_reused if includes else d_read
        seconds = now[seconds_n] - last[seconds_n] if seconds_n and seconds_n in now and seconds_n in last else None
        return Read(max(0, round(reread)), max(0, round(d_reused)), seconds, r.t_monotonic, r.t_wall)

    def _from_request(self, r: ServerReading) -> Read | None:
        req = r.last_request
        key = req.request_id if req is not None and req.request_id is not None else (req.t_end if req else None)
        if req is None or key == self._last_request_end:
            return None
        self._last_request_end = key
        reread, reused = req.reread_tokens, req.cached_tokens
        if reread is None and req.context_tokens is not None and req.predicted_tokens is not None:
            # Ollama: its count holds the cached tokens; its llama-server child showed how many it reused
            total = req.context_tokens - req.predicted_tokens
            reused = self._task_reused(r)
            reused = min(reused, total) if reused is not None else None
            reread = total - reused if reused is not None else None
        if reread is None and reused is None and req.prompt_seconds is None:
            return None
        return Read(reread, reused, req.prompt_seconds, r.t_monotonic, r.t_wall)

    def _task_reused(self, r: ServerReading) -> int | None:
        """The tokens the reply that just ended reused, as its slot showed them while it ran (None: not seen)."""
        running = {sl.id_task for sl in r.slots if sl.processing}
        for task in list(self._tasks):
            reused = self._tasks.pop(task)
            if task in running:  # still running: the reply that ended was never seen
                self._tasks = {task: reused, **self._tasks}
                return None
            return reused
        return None

    def update(self, r: ServerReading, context_tokens: int | None) -> PromptCacheView | None:
        """Count this poll's prompt reading; the session's view."""
        counted = self._from_counters(r)
        source = COUNTERS
        if counted is False:
            counted, source = self._from_request(r), TIMINGS
        else:
            self._from_request(r)  # its reply is in the counters already: only its change and repeats are read
        # the kinds of change kvmon names (a proxy of another version may send others)
        changes = tuple(PromptChange(**asdict(c)) for c in r.prompt_changes if c.change in get_args(PromptChangeKind))
        repeated = r.last_request.prompt_repeated if r.last_request is not None else None
        # what the slots hold whole (idle, or generating: a prompt being read is only part of itself)
        whole = max((sl.context_tokens or 0 for sl in r.slots if not sl.processing or (sl.n_decoded or 0) > 0),
                    default=0)
        if isinstance(counted, Read):
            self._add(counted, source)
            self._held, self._restarted = whole, False
        elif not self._restarted:
            self._held = max(self._held, whole)
        for sl in r.slots:  # after the reply that ended is counted: what runs now is a later one
            if sl.processing and sl.n_prompt_tokens_cache is not None and sl.id_task not in self._tasks:
                self._tasks[sl.id_task] = sl.n_prompt_tokens_cache
                while len(self._tasks) > 64:
                    del self._tasks[next(iter(self._tasks))]
        if not self._counted and not changes:
            return None
        self._view = replace(self._view, changes=changes, repeated=repeated, miss=self._news(r.t_monotonic))
        # the conversation's depth: what the slot holds, or held before a prompt being read again from the start
        depth = max(context_tokens or 0, self._held) if context_tokens is not None or self._held else None
        next_ttft_s, next_prompt_tokens = self._next_turn(depth)
        self._view = replace(self._view, next_ttft_s=next_ttft_s, next_prompt_tokens=next_prompt_tokens)
        return self._view

    # ---------------------------------------------------------------------------------------------- tally

    def _add(self, read: Read, source: PromptCacheSource) -> None:
        v, th = self._view, self.thresholds
        self._counted = True
        reread, reused = read.reread_tokens, read.reused_tokens
        miss = None
        total = (reread or 0) + (reused or 0)
        # a conversation that goes on: the prompt holds about what the slot held before (a new chat is shorter)
        goes_on = th.prompt_miss_held_fraction * total <= self._held <= total / th.prompt_miss_held_fraction
        if (reread is not None and reused is not None and reread >= th.prompt_miss_min_tokens
                and reused < th.prompt_miss_reused_fraction * total and goes_on):
            miss = PromptMiss(read.t, read.t_wall, reread, reused, read.seconds)
        self._view = replace(
            v, source=source, reads=v.reads + 1, reread_tokens=v.reread_tokens + (reread or 0),
            reused_tokens=v.reused_tokens + (reused or 0),
            reread_s=(v.reread_s or 0.0) + read.seconds if read.seconds is not None else v.reread_s,
            last_reread_tokens=reread, last_reused_tokens=reused, last_reread_s=read.seconds,
            misses=v.misses + (miss is not None), miss=miss or v.miss)
        if reread and reread >= MIN_READ_TOKENS and read.seconds:
            self._fit.append(((reused or 0) + reread / 2.0, read.seconds / reread))
            if reused:  # a turn the cache served: what it read is what a turn adds
                self._turns.append(reread)
        if reread is not None and reused is not None:
            self._totals.append(reread + reused)

    def _news(self, t: float) -> PromptMiss | None:
        """The latest miss while it is news: until ``prompt_miss_news_s`` after it, or a read after it that reused."""
        miss = self._view.miss
        if miss is None or t - miss.t_monotonic > self.thresholds.prompt_miss_news_s:
            return None
        if self._view.last_reread_tokens != miss.reread_tokens or self._view.last_reused_tokens != miss.reused_tokens:
            return None  # a later read reused the cache
        return miss

    # ---------------------------------------------------------------------------------------------- next turn

    def _next_turn(self, depth: int | None) -> tuple[float | None, int | None]:
        """The next turn's prompt tokens and time to first token at ``depth``: what recent turns added (the whole
        context while the cache keeps missing), at the fitted seconds per token around the depths it is read at."""
        none: tuple[float | None, int | None] = (None, None)
        if depth is None or not self._fit:
            return none
        missing = self._view.miss is not None
        if missing:  # read whole again: the last prompt and what each prompt added to the one before
            grown = [b - a for a, b in zip(list(self._totals), list(self._totals)[1:], strict=False) if b > a]
            last = self._totals[-1] if self._totals else depth
            new, start = max(depth, last + (int(statistics.median(grown)) if grown else 0)), 0
        elif self._turns:
            new, start = int(statistics.median(self._turns)), depth
        else:
            return none
        mid = start + new / 2.0
        xs, ys = [x for x, _ in self._fit], [y for _, y in self._fit]
        if len(self._fit) >= 3 and max(xs) - min(xs) > 0:
            mx, my = statistics.fmean(xs), statistics.fmean(ys)
            slope = sum((x - mx) * (y - my) for x, y in self._fit) / sum((x - mx) ** 2 for x in xs)
            per_token = max(min(ys), my + max(0.0, slope) * (mid - mx))
        else:
            per_token = statistics.median(ys)
        return new * per_token, new
