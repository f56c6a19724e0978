"""A simulated coding agent for the demo: it talks to the simulated llama-server through ``kvmon proxy``
(``/v1/chat/completions``, streamed), as agents do, and its system prompt carries the date and time, so every request
changes the prompt's first message and the server reads the whole conversation again. The proxy compares the prompts
(by hashes) and kvmon names the change; the server's counters say what the reading cost.

Each turn sends the whole conversation: the system prompt with the time now (simulated), then the task and each tool
result the scenario's script adds (about four characters a token), with the answers it got back; then it waits the
think time, in simulated seconds. ``settle`` (from the LM Studio client) waits in a stepped demo until what is due by
the simulated time now is sent and read.
"""

from __future__ import annotations

import time
from typing import Any

from kvmon.sim.lmstudio_client import ScriptedChat

DELTA = b'"delta":{"content":"'  # one generated token of a chat stream (the simulator's compact JSON)
# the agent's clock starts at a set time of day: where its stamp changes between requests (the seconds, the minute)
# is the same in every run, as the story says it
CLOCK_START_UNIX = 1772442840  # 2026-03-02 09:14:00 UTC
SYSTEM = ("Current date and time: {stamp}. You are a coding agent working in the user's repository. Read the "
          "files you need with the tools, change as little as you can, run the tests after each change and report "
          "what you did in a few lines. ") * 3


class AgentChat(ScriptedChat):
    """Sends the scenario's turns as an agent would: its conversation grows by tool results; its system prompt
    carries the time."""

    def __init__(self, sim: Any, proxy_url: str) -> None:
        super().__init__(sim, proxy_url)
        self._history: list[dict[str, str]] = []

    def _system(self) -> str:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(CLOCK_START_UNIX + self.sim.clock.now()))
        return SYSTEM.format(stamp=stamp)

    def _turn(self, context_tokens: int, answer_tokens: int) -> None:
        script = self.sim.scenario.script
        if context_tokens <= script.user_tokens(0):  # the first turn of a conversation: a new task
            self._history = []
        added = context_tokens - sum(len(m["content"]) // 4 for m in self._history)
        self._history.append({"role": "user", "content": "word" * max(1, added)})
        body = {"model": self.sim.scenario.model_alias, "stream": True, "max_tokens": answer_tokens,
                "messages": [{"role": "system", "content": self._system()}, *self._history]}
        answer = self._stream("/v1/chat/completions", body, DELTA)
        text = "".join(part.split(b'"', 1)[0].decode("utf-8", "replace") for part in answer.split(DELTA)[1:])
        self._history.append({"role": "assistant", "content": text})
