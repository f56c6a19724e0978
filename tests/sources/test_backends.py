"""Backends looked up by the name a detection, a recording or an exporter carries: each known one is itself, and a
name kvmon does not know keeps its name with generic words rather than failing."""

from __future__ import annotations

from kvmon.core.backend import GENERIC
from kvmon.sources.backends import ALL, by_name


def test_every_backend_is_found_by_the_name_it_writes() -> None:
    for backend in ALL:
        assert by_name(backend.name) is backend
    assert len({b.name for b in ALL}) == len(ALL)


def test_no_name_is_the_generic_server() -> None:
    assert by_name(None) is GENERIC
    assert by_name("") is GENERIC


def test_a_name_from_a_newer_kvmon_keeps_its_name_and_speaks_of_it_plainly() -> None:
    backend = by_name("sglang")
    assert backend.name == "sglang"
    assert backend.label == "sglang"
