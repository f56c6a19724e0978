"""Consecutive prompts compared by keyed hashes: where they first diverge (message, role, character, what changed),
how often it recurs and what it cost, the same prompt sent again, a conversation that only grows; and nothing of
a prompt's text is kept."""

from __future__ import annotations

import gc
import json
import pickle

import pytest

from kvmon.proxy.prompts import MAX_CONVERSATIONS, PromptLog, classify

SYSTEM = "You are a careful coding agent. Work in small steps and explain each one. Current time: {clock}. Be brief."
TASK = "Fix the failing test in tests/test_io.py and tell me what was wrong."


def chat(*messages: tuple[str, str], model: str = "m") -> bytes:
    return json.dumps({"model": model, "messages": [{"role": r, "content": c} for r, c in messages]}).encode()


def turn(clock: str, *more: tuple[str, str]) -> bytes:
    return chat(("system", SYSTEM.format(clock=clock)), ("user", TASK), *more)


def test_a_clock_in_the_system_prompt_is_found_at_its_character() -> None:
    log = PromptLog(seed=b"test")
    first = log.compare(turn("2026-12-07 14:02:11"), "m")
    assert first is not None and first.new_conversation and first.divergence is None
    second = log.compare(turn("2026-12-07 14:03:40", ("assistant", "Looking."), ("user", "Go on.")), "m")
    assert second is not None and second.divergence is not None
    offset = SYSTEM.index("{clock}") + len("2026-12-07 14:0")  # the first character that differs
    assert second.divergence.offset == offset and second.divergence.message_index == 0
    assert second.divergence.sentence == f"system message changed at character {offset} — looks like a timestamp"
    assert "put the date, time or anything that changes in the last user message" in second.divergence.fix


def test_a_conversation_that_only_grows_has_no_divergence() -> None:
    log = PromptLog(seed=b"test")
    log.compare(turn("fixed"), "m")
    grown = log.compare(turn("fixed", ("assistant", "Done."), ("user", "Thanks, and now?")), "m")
    assert grown is not None and grown.divergence is None and not grown.new_conversation


def test_the_same_prompt_again_counts_its_repeats() -> None:
    log = PromptLog(seed=b"test")
    body = turn("fixed")
    assert [log.compare(body, "m").repeated for _ in range(4)] == [0, 1, 2, 3]  # type: ignore[union-attr]


def test_an_edited_earlier_message_and_a_removed_one() -> None:
    log = PromptLog(seed=b"test")
    log.compare(turn("x", ("assistant", "The answer is 41."), ("user", "Sure?")), "m")
    edited = log.compare(turn("x", ("assistant", "The answer is 42."), ("user", "Sure?")), "m")
    assert edited is not None and edited.divergence is not None
    assert edited.divergence.sentence == "message 3 (assistant) changed at character 15 — a number changed"
    cut = log.compare(turn("x", ("assistant", "The answer is 42.")), "m")
    assert cut is not None and cut.divergence is not None and cut.divergence.sentence == "message 4 (user) was removed"


@pytest.mark.parametrize(("text", "at", "kind"), [
    ("Now: 2026-12-07T14:03:22Z ok", 12, "timestamp"),
    ("at 14:03:22 today", 7, "time"),
    ("on 2026-12-07 only", 10, "date"),
    ("session 5f1c2a9e-77d3-4b1e-9c10-aa5ce1f0b2d4 ok", 12, "id"),
    ("you have 17 files", 10, "number"),
    ("You are a helpful bot", 17, "text"),
])
def test_what_changed_is_classed(text: str, at: int, kind: str) -> None:
    assert classify(text, at) == kind


def test_changes_are_tallied_with_their_cost_and_since_when() -> None:
    now = [1_800_000_000.0]
    log = PromptLog(seed=b"test", clock=lambda: now[0])
    for minute in range(5):
        now[0] += 60.0
        c = log.compare(turn(f"14:0{minute}:00"), "m")
        log.settle(c, 2000, 1.5)
    (change,) = log.document()["changes"]
    assert change["count"] == 4 and change["first_unix"] == 1_800_000_120.0 and change["last_unix"] == 1_800_000_300.0
    assert change["reread_tokens"] == 8000 and change["reread_seconds"] == pytest.approx(6.0)
    assert change["message_index"] == 0 and change["role"] == "system" and change["change"] == "time"


def test_conversations_are_told_apart_by_model_and_content_and_forgotten() -> None:
    now = [0.0]
    log = PromptLog(seed=b"test", clock=lambda: now[0], idle_s=60.0)
    log.compare(chat(("user", "one")), "a")
    log.compare(chat(("user", "two")), "a")
    assert log.compare(chat(("user", "one"), ("assistant", "1")), "a").divergence is None  # type: ignore[union-attr]
    assert log.compare(chat(("user", "one"), ("assistant", "1")), "b").new_conversation  # type: ignore[union-attr]
    now[0] = 1000.0
    assert log.compare(chat(("user", "one"), ("assistant", "1")), "a").new_conversation  # type: ignore[union-attr]
    for i in range(MAX_CONVERSATIONS + 10):
        log.compare(chat(("user", f"chat {i}")), "a")
    assert log.document()["conversations"] == MAX_CONVERSATIONS


def test_what_is_not_a_prompt_is_not_compared() -> None:
    log = PromptLog(seed=b"test")
    assert log.compare(b"not json", None) is None
    assert log.compare(b'{"input": "embeddings"}', None) is None
    assert log.compare(b'{"messages": [1, 2]}', None) is None


def test_no_prompt_text_is_kept_or_published() -> None:
    secret = "PLEASE-NEVER-STORE-THIS-SENTENCE"
    log = PromptLog()
    log.compare(turn("14:00:00", ("user", f"{secret} one")), "m")
    log.compare(turn("14:01:00", ("user", f"{secret} two")), "m")
    doc = json.dumps(log.document())
    assert secret not in doc and "careful coding agent" not in doc
    kept = pickle.dumps([vars(c) for c in log._conversations])  # what the log holds between prompts
    for needle in (secret, "careful coding agent", TASK[:20]):
        for encoding in ("utf-8", "utf-16-le", "utf-32-le"):
            assert needle.encode(encoding) not in kept, (needle, encoding)
    gc.collect()


def test_a_role_of_the_clients_own_naming_is_not_kept_or_shown() -> None:
    log = PromptLog(seed=b"test")
    secret = "\x1b]0;PRIVATE-ROLE\x07"  # a role that is the client's text, with a terminal's escape in it
    log.compare(chat((secret, "first"), ("user", TASK)), "m")
    second = log.compare(chat((secret, "first, edited"), ("user", TASK)), "m")
    assert second is not None and second.divergence is not None
    assert second.divergence.sentence == "message 1 (other) changed at character 5 — the text there differs"
    assert "PRIVATE-ROLE" not in json.dumps(log.document()) and "\x1b" not in json.dumps(log.document())
