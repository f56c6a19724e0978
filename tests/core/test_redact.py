"""Credentials scrubbed from a whole document, its lines kept."""

from __future__ import annotations

from kvmon.core.redact import scrub


def test_scrubbing_a_whole_document_keeps_its_lines() -> None:
    assert scrub("<svg>\n  <text>a</text>\n</svg>\n") == "<svg>\n  <text>a</text>\n</svg>\n"
