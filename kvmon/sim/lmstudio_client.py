"""A simulated chat client for the LM Studio demo: it plays the scenario's conversation through ``kvmon proxy``
(REST v1 ``/api/v1/chat``, streamed), as a user's app would, so the proxy sees the tokens and LM Studio's ``stats``.

LM Studio has no counters of its own, so without a client going through the proxy there is no live speed to show;
the simulated LM Studio runs with its own script off and this client sends each turn: the whole conversation so
far (about four characters a token) and the answer length, then waits the think time, in simulated seconds.
"""

from __future__ import annotations

import http.client
import json
import threading
from typing import Any
from urllib.parse import urlsplit


class ScriptedChat:
    """Sends the scenario's turns through the proxy at ``proxy_url`` on a daemon thread until stopped."""

    def __init__(self, sim: Any, proxy_url: str) -> None:
        self.sim = sim
        parts = urlsplit(proxy_url)
        self._host, self._port = parts.hostname or "127.0.0.1", int(parts.port or 80)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kvmon-sim-chat", daemon=True)
        self.turns = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=3)

    def _turn(self, context_tokens: int, answer_tokens: int) -> None:
        body = {"model": self.sim.scenario.model_alias, "input": "word" * context_tokens, "stream": True,
                "max_output_tokens": answer_tokens}
        conn = http.client.HTTPConnection(self._host, self._port, timeout=600)
        try:
            conn.request("POST", "/api/v1/chat", body=json.dumps(body), headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            while not self._stop.is_set() and resp.read(4096):
                pass
        finally:
            conn.close()

    def _run(self) -> None:
        script = self.sim.scenario.script
        clock = self.sim.clock
        if not clock.sleep_until(clock.now() + script.start_delay_s, self._stop):
            return
        while not self._stop.is_set():
            context = 0
            for turn in range(script.n_turns):
                context += script.user_tokens(turn)
                try:
                    self._turn(context, script.generated_tokens)
                except OSError:
                    if self._stop.wait(1.0):
                        return
                    continue
                self.turns += 1
                context += script.generated_tokens
                if not clock.sleep_until(clock.now() + script.think_s, self._stop):
                    return
            if not script.loop:
                return
