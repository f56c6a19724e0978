"""What ``--help`` tells a user before they type a secret: a key on the command line is readable by every user of
the machine, and where to put it instead."""

from __future__ import annotations

import argparse

from kvmon.cli import build_parser


def _api_key_helps(parser: argparse.ArgumentParser) -> list[str]:
    found = [a.help or "" for a in parser._actions if "--api-key" in a.option_strings]
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub in a.choices.values():
                found += _api_key_helps(sub)
    return found


def test_every_api_key_option_warns_that_a_command_line_is_readable_and_says_where_else() -> None:
    helps = _api_key_helps(build_parser())
    assert len(helps) >= 3  # the dashboard, once, serve, screenshot
    for h in helps:
        assert "every user of this machine can read a command line" in h.lower(), h
        assert "KVMON_API_KEY" in h and "keychain" in h, h
