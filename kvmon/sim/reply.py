"""What a simulated endpoint answers: status, headers and a body, or a stream of timed chunks."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

JSON_TYPE = "application/json; charset=utf-8"


class StreamAborted(Exception):
    """The simulated server went away mid-answer (restart, reload): the connection just closes."""


@dataclass
class Reply:
    """One HTTP answer; ``stream`` (chunked transfer) replaces ``body`` when set."""

    status: int = 200
    body: bytes = b""
    content_type: str = JSON_TYPE
    headers: dict[str, str] = field(default_factory=dict)
    close: bool = False
    stream: Iterator[bytes] | None = None


def dumps(obj: Any) -> bytes:
    """Compact JSON as llama-server writes it (no spaces, UTF-8 kept, ``\\u`` for control characters)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def json_reply(obj: Any, status: int = 200, **kw: Any) -> Reply:
    return Reply(status, dumps(obj), **kw)


def parse_body(raw: bytes) -> dict[str, Any] | None:
    """A request body as a JSON object, or None when it is not one."""
    if not raw:
        return {}
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


WORDS = ("the", " cache", " grows", " with", " every", " token", ",", " and", " decode", " reads", " it", " all",
         " again", ".", " Memory", " bandwidth", " sets", " the", " pace", ";", " context", " costs", " time", "\n")


def token_text(id_task: int, k: int) -> str:
    """A deterministic stand-in for generated token ``k`` of a task."""
    return WORDS[(id_task * 7 + k * 13 + (k * k) % 5) % len(WORDS)]


def estimate_tokens(text: str) -> int:
    """Prompt tokens for a text (about four characters per token)."""
    return max(1, len(text) // 4)


PREFIX_BLOCK_CHARS = 256  # the simulated prompt cache compares prompts in blocks of this many characters


def prompt_prefix(messages: list[tuple[str, str]]) -> tuple[tuple[int, int], ...]:
    """A prompt as the simulated prompt cache sees it: (digest, tokens) of each block of each message (its role and
    template tokens in the first), so that a change anywhere keeps the blocks before it cached."""
    out = []
    for i, (role, text) in enumerate(messages):
        blocks = [text[k:k + PREFIX_BLOCK_CHARS] for k in range(0, len(text), PREFIX_BLOCK_CHARS)] or [""]
        for j, block in enumerate(blocks):
            tokens = len(block) // 4 + (4 if j == 0 else 0)
            out.append((zlib.crc32(f"{i}\x00{role}\x00{block}".encode("utf-8", "replace")), tokens))
    return tuple(out)


def chat_messages(body: dict[str, object]) -> list[tuple[str, str]]:
    """(role, text) of a chat request's messages (odd entries left out)."""
    msgs = body.get("messages") if isinstance(body.get("messages"), list) else []
    return [(str(m.get("role", "")), str(m.get("content", ""))) for m in msgs if isinstance(m, dict)]  # type: ignore[union-attr]
