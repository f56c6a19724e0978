"""Text from outside kvmon (a model's name, an alias, a path, a server's error message, a log line, a label) as
plain, visible text: what a terminal, a JSON document, a Prometheus label or the window can show as it is.

A server or a file may put control characters in what it names: an escape sequence (``ESC ] 0 ; … BEL`` sets a
terminal's title, ``ESC [ 2 J`` clears it), a newline that forges a line, a C1 control (U+009B is a one-byte
CSI to some terminals) or a bidirectional override (U+202E shows "evil" as "live"). Here the C0 controls and
DEL are shown in caret notation, as ``cat -v`` and ``less`` show them (ESC as ``^[``, a newline as ``^J``, DEL as
``^?``: plain ASCII, which every font has, where the Control Pictures ␛ ␊ are missing from many), the C1 controls
and the line and paragraph separators become U+FFFD, and the bidirectional marks, embeddings, overrides and
isolates are removed. Every other character, joiners and emoji included, is left as it is; lone surrogates become
U+FFFD. Applied where outside input is read
(``kvmon.core.jsonvals.json_str``, GGUF metadata, log lines, Prometheus labels, a server's error text), so every
route downstream carries clean text.
"""

from __future__ import annotations

_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_TABLE: dict[int, str | int | None] = {
    **{c: "^" + chr(c + 0x40) for c in range(0x20)},  # C0 controls: ^@ … ^_ (ESC: ^[, newline: ^J)
    0x7F: "^?",  # DEL
    **dict.fromkeys(range(0x80, 0xA0), 0xFFFD),  # C1 controls
    0x2028: 0xFFFD, 0x2029: 0xFFFD,  # line and paragraph separators
    **dict.fromkeys(_BIDI, None),
}


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (a proper pair becomes its character)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def plain_text(text: str) -> str:
    """``text`` with no control character, bidirectional override or lone surrogate left (see the module)."""
    if text.isprintable():  # the usual name: nothing to do (every character this changes is unprintable)
        return text
    return clean_text(text).translate(_TABLE)
