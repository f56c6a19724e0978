"""The simulator reads a request body as a JSON object or refuses it: an empty body is an empty request, anything
else that is not an object gets a 400 with an error document, as llama-server answers."""

from __future__ import annotations

import httpx
import pytest

from kvmon.sim.reply import parse_body
from kvmon.sim.server import SimServer


def test_a_body_is_an_object_an_empty_request_or_nothing() -> None:
    assert parse_body(b"") == {}
    assert parse_body(b'{"prompt": "hi", "n_predict": 2}') == {"prompt": "hi", "n_predict": 2}
    assert parse_body(b"not json") is None
    assert parse_body(b"[1, 2]") is None
    assert parse_body(b"\xff\xfe") is None


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]"])
def test_the_simulated_server_refuses_a_body_that_is_no_object(body: bytes) -> None:
    with SimServer("seed-3090x2") as sim:
        r = httpx.post(f"{sim.url}/completion", content=body, headers={"Content-Type": "application/json"},
                       timeout=10)
    assert r.status_code == 400
    error = r.json()["error"]
    assert (error["code"], error["type"]) == (400, "invalid_request_error")
