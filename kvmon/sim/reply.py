"""What a simulated endpoint answers: status, headers and a body, or a stream of timed chunks."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kvmon.core.jsonvals import json_array
from kvmon.sim.clock import SimClock
from kvmon.sim.requests import SimRequest
from kvmon.sim.served import ServedSimulation

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
    # the client went away before the answer ended (a stream's empty chunks are the moments the server looks, as
    # llama-server looks every second while it works): what the server does then (cancel the request)
    on_abort: Callable[[], None] | None = None


HEARTBEAT_S = 0.2  # real seconds between two looks at whether a streaming client is still there


def wait_until(clock: SimClock, until: float, stop: threading.Event) -> Iterator[bytes]:
    """Wait for simulated ``until``, yielding an empty chunk every ``HEARTBEAT_S`` real seconds (the server looks
    whether its client is still there); StreamAborted when the simulator stops meanwhile."""
    while True:
        now = clock.now()
        if now >= until:
            return
        if not clock.sleep_until(min(until, now + HEARTBEAT_S * clock.speed), stop):
            raise StreamAborted("simulator stopping")
        if clock.now() < until:
            yield b""


def tokens_as_they_come(sim: ServedSimulation, req: SimRequest, make: Callable[[int], bytes]) -> Iterator[bytes]:
    """``make(k)`` for each generated token ``k`` as it appears in simulated time, with ``wait_until``'s empty chunks
    while it waits; a restart that cut the request short is the caller's to answer."""
    sent = 0
    while sent < req.predicted_n:
        yield from wait_until(sim.clock, float(req.token_times[sent]), sim.stopping)
        upto = req.n_decoded(sim.clock.now())
        yield b"".join(make(k) for k in range(sent, upto))
        sent = upto


def wait_end(sim: ServedSimulation, req: SimRequest) -> None:
    """Wait until the request has ended; StreamAborted when the server died meanwhile or the simulator stops."""
    if not sim.clock.sleep_until(req.t_end, sim.stopping) or req.aborted_at is not None:
        raise StreamAborted("simulated server restarted")


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


def answer_text(req: SimRequest) -> str:
    """The whole text a request generated."""
    return "".join(token_text(req.id_task, k) for k in range(req.predicted_n))


def estimate_tokens(text: str) -> int:
    """Prompt tokens for a text (about four characters per token)."""
    return max(1, len(text) // 4)


def chat_text(body: dict[str, Any]) -> str:
    """A chat request's messages as a chat template lays them out (each role's tag, then its text; odd entries left
    out): the text the prompt cache compares, so that a change in one message keeps the messages before it cached."""
    return "".join(f"<|{m.get('role', '')}|>\n{m.get('content', '')}\n" for m in json_array(body.get("messages"))
                   if isinstance(m, dict))
