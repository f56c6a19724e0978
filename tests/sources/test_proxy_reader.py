"""The proxy's measurements are used only for the server it forwards to: the same host and port, with localhost and
127.0.0.1 one machine."""

from __future__ import annotations

import pytest

from kvmon.sources.proxy_reader import same_endpoint


@pytest.mark.parametrize(("a", "b", "same"), [
    ("http://127.0.0.1:11434", "http://localhost:11434", True),
    ("http://127.0.0.1:11434", "http://127.0.0.1:11434/", True),
    ("http://localhost", "http://127.0.0.1:11434", True),  # the backend's default port
    ("http://127.0.0.1:11434", "http://127.0.0.1:11435", False),
    ("http://192.0.2.7:11434", "http://127.0.0.1:11434", False),
    ("http://127.0.0.1:99999", "http://127.0.0.1:11434", False),  # an impossible port is no server
])
def test_the_same_server(a: str, b: str, same: bool) -> None:
    assert same_endpoint(a, b, default_port=11434) is same
    assert same_endpoint(b, a, default_port=11434) is same
