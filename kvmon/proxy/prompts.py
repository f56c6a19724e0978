"""Why a prompt cache keeps missing: consecutive prompts of one conversation compared through ``kvmon proxy``, the
first place they diverge (which message, its role, the character, what changed there), how often that recurs and
what it has cost, and the same prompt sent again and again.

Prompts are compared by keyed hashes and never kept: each message becomes a BLAKE2 digest and a per-character
fingerprint (16 bits of a table keyed by random bytes drawn when the proxy starts, mixed with the position), which
say where two prompts differ and cannot be read back without that key; the key lives only in the proxy's memory.
What changed is classed from the new prompt's characters around the divergence while it is being compared ("looks
like a timestamp"), and only the class is kept. A conversation is forgotten after ``IDLE_S`` without a prompt, and
at most ``MAX_CONVERSATIONS`` are held. Nothing here is written anywhere: the ``prompts`` section of the proxy's
``/kvmon/stats`` document carries message indexes, roles, offsets, classes, counts, times and token figures only.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

MAX_CONVERSATIONS = 32
IDLE_S = 1800.0  # a conversation without a prompt for this long is forgotten
MAX_CHARS = 4_000_000  # a prompt longer than this (characters) is not compared
MAX_CHANGES = 16  # distinct kinds of change tallied (message, role, class), the oldest dropped
ROLES = ("system", "developer", "user", "assistant", "tool", "function")  # the roles named as they are
CONTEXT_CHARS = 24  # characters of the new prompt looked at on each side of a divergence to class it

Change = Literal["timestamp", "date", "time", "id", "number", "text", "removed", "role"]
CHANGE_WORDS: dict[str, str] = {"timestamp": "looks like a timestamp", "date": "looks like a date",
                                "time": "looks like a time of day", "id": "looks like an id or a random value",
                                "number": "a number changed", "text": "the text there differs"}
FIXES: dict[str, str] = {
    "system": "keep the system prompt stable; put the date, time or anything that changes in the last user message",
    "other": "keep earlier messages as they were sent (the server reuses a prompt only up to its first change); "
             "add what changes at the end",
}
_TIME = re.compile(r"\b\d{1,2}:\d{2}(?::\d{2})?(?:[.,]\d+)?\s*(?:[AaPp][Mm])?\b")
_DATE = re.compile(r"\b(?:\d{4}-\d{2}-\d{2}|\d{1,2}[/.]\d{1,2}[/.]\d{2,4}|(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|"
                   r"Oct|Nov|Dec)[a-z]*\.? \d{1,2}|\d{1,2} (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*)",
                   re.IGNORECASE)
_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}|\b1[6-9]\d{8}(?:\d{3})?\b")  # ISO date-time, Unix seconds/ms
_ID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-|\b[0-9a-f]{16,}\b|\b[A-Za-z0-9_-]{20,}\b", re.IGNORECASE)
_NUMBER = re.compile(r"\d")


def classify(window: str, at: int) -> Change:
    """What changed, from the new prompt's characters around the divergence (``at`` is its place in ``window``)."""
    def covered(pattern: re.Pattern[str]) -> bool:
        return any(m.start() <= at <= m.end() for m in pattern.finditer(window))

    if covered(_STAMP) or (covered(_TIME) and _DATE.search(window)) or (covered(_DATE) and _TIME.search(window)):
        return "timestamp"
    if covered(_TIME):
        return "time"
    if covered(_DATE):
        return "date"
    if covered(_ID):
        return "id"
    return "number" if _NUMBER.search(window[max(0, at - 2): at + 3]) else "text"


class _Keyed:
    """The random key of this proxy's hashes: BLAKE2's key and the fingerprint tables, drawn once at start."""

    def __init__(self, seed: bytes | None = None) -> None:
        raw = seed if seed is not None else os.urandom(32)
        self.key = hashlib.blake2b(raw, digest_size=32).digest()
        rng = np.random.default_rng(np.frombuffer(hashlib.sha256(raw).digest(), dtype=np.uint32))
        self.low = rng.integers(0, 2**16, size=2**16, dtype=np.uint16)
        self.high = rng.integers(0, 2**16, size=32, dtype=np.uint16)  # the 17 Unicode planes and spare
        self.pos = rng.integers(0, 2**16, size=2**16, dtype=np.uint16)

    def digest(self, role: str, text: str) -> bytes:
        h = hashlib.blake2b(key=self.key, digest_size=16)
        h.update(role.encode("utf-8", "replace") + b"\x00" + text.encode("utf-8", "surrogatepass"))
        return h.digest()

    def fingerprint(self, text: str) -> np.ndarray:
        cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        pos = np.arange(cps.size, dtype=np.uint32) & 0xFFFF
        return self.low[cps & 0xFFFF] ^ self.high[(cps >> 16) & 0x1F] ^ self.pos[pos]


@dataclass
class _Message:
    role: str
    digest: bytes
    fingerprint: np.ndarray  # per character, keyed


@dataclass
class _Conversation:
    model: str | None
    messages: list[_Message]
    last_seen: float
    repeated: int = 0  # the same prompt sent again, in a row


@dataclass
class Divergence:
    """Where a prompt first differs from the one before it in its conversation."""

    message_index: int  # 0 the first message
    role: str
    offset: int | None  # the first differing character in that message (None: the message was removed)
    change: Change

    @property
    def sentence(self) -> str:
        """"system message changed at character 212 — looks like a timestamp"."""
        if self.change == "removed":
            return f"message {self.message_index + 1} ({self.role}) was removed"
        if self.change == "role":
            return f"message {self.message_index + 1} changed its role to {self.role}"
        where = ("system message" if self.role == "system" and self.message_index == 0 else
                 "the prompt" if self.role == "prompt" else f"message {self.message_index + 1} ({self.role})")
        return f"{where} changed at character {self.offset} — {CHANGE_WORDS[self.change]}"

    @property
    def fix(self) -> str:
        return FIXES["system" if self.role == "system" else "other"]


@dataclass
class _Tally:
    """One kind of change, as it recurs: how often, since when, and the prompt reading it cost."""

    divergence: Divergence
    count: int = 0
    first_unix: float = 0.0
    last_unix: float = 0.0
    reread_tokens: int = 0
    reread_seconds: float = 0.0


@dataclass(frozen=True)
class Compared:
    """One prompt against the one before it in its conversation (what the stats record of its reply carries)."""

    divergence: Divergence | None = None
    repeated: int = 0  # this exact prompt was sent this many times in a row before
    new_conversation: bool = False


def messages_of(body: Mapping[str, Any]) -> list[tuple[str, str]] | None:
    """(role, text) of each message of a chat request, or one ("prompt", text) of a completion; None otherwise."""
    msgs = body.get("messages")
    if isinstance(msgs, list):
        out = []
        for m in msgs:
            if not isinstance(m, dict):
                return None
            role = m.get("role")  # a role of the client's own naming is not kept: it is the client's text
            out.append((role if role in ROLES else "other", _text_of(m.get("content"))))
        return out
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return [("prompt", prompt)]
    return None


def _text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of parts (images stand as one mark each)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p if isinstance(p, str) else p["text"] if isinstance(p, dict) and isinstance(p.get("text"), str)
                       else "\ufffc" for p in content)
    return "" if content is None else json.dumps(content, sort_keys=True)[:100_000]


class PromptLog:
    """The proxy's memory of recent conversations (hashes only) and the tally of what made their prompts change."""

    def __init__(self, seed: bytes | None = None, *, clock: Callable[[], float] = time.time,
                 max_conversations: int = MAX_CONVERSATIONS, idle_s: float = IDLE_S) -> None:
        """``seed``: the hashes' key material (tests only; the proxy draws it at random)."""
        self._keyed = _Keyed(seed)
        self._clock = clock
        self._max = max_conversations
        self._idle_s = idle_s
        self._lock = threading.Lock()
        self._conversations: list[_Conversation] = []
        self._tallies: dict[tuple[int, str, str], _Tally] = {}
        self.compared = 0
        self.last: Compared | None = None

    def compare(self, body: bytes, model: str | None = None) -> Compared | None:
        """Compare one request's prompt with the last one of its conversation (None: not a prompt kvmon reads)."""
        try:
            obj = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None
        messages = messages_of(obj) if isinstance(obj, dict) else None
        if not messages or sum(len(t) for _r, t in messages) > MAX_CHARS:
            return None
        now = self._clock()
        k = self._keyed
        digests = [k.digest(role, text) for role, text in messages]
        with self._lock:
            self._conversations = [c for c in self._conversations if now - c.last_seen <= self._idle_s]
            conv = self._match(model, messages, digests)
            out = self._against(conv, messages, digests) if conv is not None else Compared(new_conversation=True)
            new = [_Message(role, d, k.fingerprint(text)) for (role, text), d in zip(messages, digests, strict=True)]
            if conv is None:
                conv = _Conversation(model, new, now)
                self._conversations.append(conv)
                if len(self._conversations) > self._max:
                    self._conversations.remove(min(self._conversations, key=lambda c: c.last_seen))
            else:
                conv.messages, conv.last_seen = new, now
                conv.repeated = out.repeated
            self.compared += 1
            self.last = out
            if out.divergence is not None:
                self._count(out.divergence, now)
            return out

    def _match(self, model: str | None, messages: list[tuple[str, str]], digests: list[bytes]
               ) -> _Conversation | None:
        """The conversation this prompt continues: the most leading messages in common, or, failing any, the same
        message after the first (a conversation whose first message changed)."""
        best, best_key = None, (0, 0)
        for c in self._conversations:
            if c.model != model:
                continue
            pairs = zip(c.messages, digests, strict=False)
            lead = sum(1 for _ in itertools.takewhile(lambda md: md[0].digest == md[1], pairs))  # leading ones alike
            later = sum(1 for m, d in zip(c.messages[1:], digests[1:], strict=False) if m.digest == d)
            key = (lead, later)
            if (lead or later) and key > best_key:
                best, best_key = c, key
        return best

    def _against(self, conv: _Conversation, messages: list[tuple[str, str]], digests: list[bytes]) -> Compared:
        old = conv.messages
        if [m.digest for m in old] == digests:
            return Compared(repeated=conv.repeated + 1)
        for i, (m, d) in enumerate(zip(old, digests, strict=False)):
            if m.digest == d:
                continue
            role, text = messages[i]
            if role != m.role:
                return Compared(Divergence(i, role, 0, "role"))
            new_fp = self._keyed.fingerprint(text)
            n = min(len(new_fp), len(m.fingerprint))
            differ = np.flatnonzero(new_fp[:n] != m.fingerprint[:n])
            offset = int(differ[0]) if differ.size else n
            window_start = max(0, offset - CONTEXT_CHARS)
            change = classify(text[window_start: offset + CONTEXT_CHARS], offset - window_start)
            return Compared(Divergence(i, role, offset, change))
        if len(digests) < len(old):  # the old prompt with messages cut from its end
            i = len(digests)
            return Compared(Divergence(i, old[i].role, None, "removed"))
        return Compared()  # the old prompt, then more: the server reuses all of it

    def _count(self, d: Divergence, now: float) -> None:
        key = (d.message_index, d.role, d.change)
        t = self._tallies.get(key)
        if t is None:
            if len(self._tallies) >= MAX_CHANGES:
                del self._tallies[min(self._tallies, key=lambda k: self._tallies[k].last_unix)]
            t = self._tallies[key] = _Tally(d, first_unix=now)
        t.divergence, t.count, t.last_unix = d, t.count + 1, now

    def settle(self, compared: Compared | None, reread_tokens: int | None, reread_seconds: float | None) -> None:
        """The reply's prompt reading, as its server timed it: counted against the change that caused it."""
        if compared is None or compared.divergence is None:
            return
        d = compared.divergence
        with self._lock:
            t = self._tallies.get((d.message_index, d.role, d.change))
            if t is not None:
                t.reread_tokens += reread_tokens or 0
                t.reread_seconds += reread_seconds or 0.0

    def document(self) -> dict[str, Any]:
        """The ``prompts`` section of ``/kvmon/stats``: no prompt text, only where and how prompts changed."""
        with self._lock:
            changes = sorted(self._tallies.values(), key=lambda t: -t.last_unix)
            last = self.last
            return {
                "compared": self.compared,
                "conversations": len(self._conversations),
                "changes": [change_record(t) for t in changes],
                "last": None if last is None else {
                    "change": None if last.divergence is None else last.divergence.sentence,
                    "repeated": last.repeated, "new_conversation": last.new_conversation},
            }


def change_record(t: _Tally) -> dict[str, Any]:
    d = t.divergence
    return {"message_index": d.message_index, "role": d.role, "offset": d.offset, "change": d.change,
            "sentence": d.sentence, "fix": d.fix, "count": t.count, "first_unix": t.first_unix,
            "last_unix": t.last_unix, "reread_tokens": t.reread_tokens, "reread_seconds": t.reread_seconds}

