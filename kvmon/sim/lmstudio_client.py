"""A simulated chat client for the LM Studio demo: it plays the scenario's conversation through ``kvmon proxy``
(REST v1 ``/api/v1/chat``, streamed), as a user's app would, so the proxy sees the tokens and LM Studio's ``stats``.

LM Studio has no counters of its own, so without a client going through the proxy there is no live speed to show;
the simulated LM Studio runs with its own script off and this client sends each turn: the whole conversation so
far (about four characters a token) and the answer length, then waits the think time, in simulated seconds.
When the demo is stepped (``kvmon once --demo``, the story tests), ``settle`` waits until the client has done what
is due by the simulated time now, so what it sends when does not depend on how fast threads run.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from typing import Any
from urllib.parse import urlsplit

SETTLE_TIMEOUT_S = 5.0  # real seconds a stepped demo waits for the client at most
DELTA = b"event: message.delta"  # one generated token of a REST v1 stream


class ScriptedChat:
    """Sends the scenario's turns through the proxy at ``proxy_url`` on a daemon thread until stopped."""

    def __init__(self, sim: Any, proxy_url: str) -> None:
        self.sim = sim
        parts = urlsplit(proxy_url)
        self._host, self._port = parts.hostname or "127.0.0.1", int(parts.port or 80)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kvmon-sim-chat", daemon=True)
        self._changed = threading.Condition()
        self._waits_until: float | None = None  # asleep, or waiting on an answer, until this simulated time
        self._answer: Any = None  # the answer being read (the simulator's request) and its tokens read so far
        self._tokens_read = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=3)

    def settle(self) -> None:
        """Wait until the client waits for a simulated time still to come (its think time, or the end of the answer
        it reads) and has read every token of the answer made by now: everything due by now is sent and read."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        with self._changed:
            while not self._stop.is_set() and self._thread.is_alive() and time.monotonic() < deadline and \
                    not self._settled(self.sim.clock.now()):
                self._changed.wait(0.005)

    def _settled(self, now: float) -> bool:
        if self._waits_until is None or self._waits_until <= now:
            return False
        return self._answer is None or self._tokens_read >= self._answer.n_decoded(now)

    def _waiting(self, until: float | None) -> None:
        with self._changed:
            self._waits_until = until
            self._changed.notify_all()

    def _turn(self, context_tokens: int, answer_tokens: int) -> None:
        body = {"model": self.sim.scenario.model_alias, "input": "word" * context_tokens, "stream": True,
                "max_output_tokens": answer_tokens}
        self._stream("/api/v1/chat", body, DELTA)

    def _stream(self, path: str, body: dict[str, Any], delta: bytes) -> bytes:
        """POST ``body`` and read its streamed answer as a client does, counting each ``delta`` as a token read (what
        ``settle`` waits on); the answer's bytes."""
        conn = http.client.HTTPConnection(self._host, self._port, timeout=600)
        answer = bytearray()
        try:
            conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
            resp = conn.getresponse()  # the server has taken the request: its answer's timeline is fixed
            now = self.sim.clock.now()
            req = self.sim.engine.slot_request(0, now)
            with self._changed:
                self._answer, self._tokens_read = req, 0
            self._waiting(req.t_end if req is not None and req.t_end > now else None)
            tail = b""
            while not self._stop.is_set():
                data = resp.read1(4096)
                if not data:
                    break
                answer += data
                seen = tail + data
                with self._changed:
                    self._tokens_read += seen.count(delta) - tail.count(delta)
                    self._changed.notify_all()
                tail = seen[-len(delta):]
        finally:
            conn.close()
            with self._changed:
                self._answer = None
            self._waiting(None)
        return bytes(answer)

    def _sleep(self, seconds: float) -> bool:
        clock = self.sim.clock
        until = clock.now() + seconds
        self._waiting(until)
        return bool(clock.sleep_until(until, self._stop))

    def _run(self) -> None:
        script = self.sim.scenario.script
        if not self._sleep(script.start_delay_s):
            return
        while not self._stop.is_set():
            context = 0
            for turn in range(script.n_turns):
                context += script.user_tokens(turn)
                try:
                    self._turn(context, script.generated_tokens)
                except (OSError, http.client.HTTPException):  # the server went (or stops) mid-answer
                    if self._stop.wait(1.0):
                        return
                    continue
                context += script.generated_tokens
                if not self._sleep(script.think_s):
                    return
            if not script.loop:
                return
