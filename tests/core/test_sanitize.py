"""Server text made plain: controls visible, bidirectional overrides gone, every other character kept."""

from __future__ import annotations

import pytest

from kvmon.core.jsonvals import json_str, json_text
from kvmon.core.readings import FailureKind, SourceFailure
from kvmon.core.sanitize import plain_text

HOSTILE = "\x1b]0;PWNED\x07\x1b[31mRED\x1b[2J\nforged\r\u009b31m\u202eevil\u2066x\u2069\u2028y\x7f"


def test_escape_sequences_newlines_and_c1_controls_become_visible() -> None:
    out = plain_text(HOSTILE)
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in out), ascii(out)
    assert out.startswith("^[]0;PWNED^G^[[31mRED^[[2J^Jforged^M\ufffd31m")
    assert out.endswith("evilx\ufffdy^?")  # the isolates gone; the line separator and DEL shown


@pytest.mark.parametrize("mark", ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068",
                                  "\u2069", "\u200e", "\u200f", "\u061c"])
def test_bidirectional_marks_overrides_and_isolates_are_removed(mark: str) -> None:
    assert plain_text(f"a{mark}live") == "alive"


@pytest.mark.parametrize("name", ["Qwen3.5-27B-Q4_K_M.gguf", "llama3.1:8b", "Mistral Small 3.2 (24B)",
                                  "模型-中文", "👩‍💻 coder", "café\u00a0noir", "x\u00adsoft"])
def test_ordinary_names_joiners_and_emoji_stay_as_they_are(name: str) -> None:
    assert plain_text(name) == name


def test_a_lone_surrogate_becomes_the_replacement_character() -> None:
    assert plain_text("m\ud800x\x1b") == "m\ufffdx^["


def test_json_str_is_plain_and_json_text_keeps_a_command_line_whole() -> None:
    cmd = "llama-server \\\n  --port 9000\t-m /models/x.gguf"
    assert json_str(HOSTILE) == plain_text(HOSTILE)
    assert json_text(cmd) == cmd
    assert json_str("") is None and json_text(3) is None


def test_a_servers_error_text_quoted_in_a_failure_is_plain() -> None:
    f = SourceFailure(FailureKind.SERVER_ERROR, "http://x/props answered HTTP 500: \x1b[2Jmodel \u202egone\nx")
    assert f.reason == "http://x/props answered HTTP 500: ^[[2Jmodel gone^Jx" and str(f) == f.reason
