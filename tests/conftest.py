"""Shared fixtures: a canned-response HTTP server on 127.0.0.1 (see ``tests/helpers_http.py``)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers_http import FixtureServer


@pytest.fixture
def fixture_server() -> Iterator[FixtureServer]:
    """A running canned-response server: ``.url``, ``.set(path, status, body, headers)``, ``.hang(path, s)``."""
    server = FixtureServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fixture_server_factory() -> Iterator[Callable[[], FixtureServer]]:
    """Make as many canned-response servers as a test needs; all are stopped afterwards."""
    servers: list[FixtureServer] = []

    def make() -> FixtureServer:
        s = FixtureServer()
        servers.append(s)
        return s

    try:
        yield make
    finally:
        for s in servers:
            s.stop()
