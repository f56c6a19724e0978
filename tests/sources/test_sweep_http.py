"""A sweep's streamed answers read line by line with the time each line came: Ollama's JSON lines and the
server-sent events of llama-server and vLLM, passing over blank lines, comments, [DONE] and what is not an object."""

from __future__ import annotations

from kvmon.sources.sweep_http import json_lines


def test_server_sent_events_give_each_object_with_its_time() -> None:
    lines = [(1.0, b": ping"), (1.1, b'data: {"content": "a", "tokens": [1]}'), (1.2, b""),
             (1.3, b'data: {"content": "b"}'), (1.4, b"event: end"), (1.5, b"data: [DONE]")]
    assert list(json_lines(iter(lines), prefix=b"data: ")) == [(1.1, {"content": "a", "tokens": [1]}),
                                                                (1.3, {"content": "b"})]


def test_json_lines_skip_what_is_not_one_object() -> None:
    lines = [(2.0, b'{"response": "x", "done": false}\n'), (2.1, b"{broken"), (2.2, b"[1, 2]"),
             (2.3, b'{"done": true, "eval_count": 16}')]
    assert list(json_lines(iter(lines))) == [(2.0, {"response": "x", "done": False}),
                                             (2.3, {"done": True, "eval_count": 16})]
