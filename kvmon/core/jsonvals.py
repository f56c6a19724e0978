"""Untrusted input as the values it stands for: the one rule for a server's JSON, Prometheus samples, log-line
numbers and recording lines, so that no single bad value can stop a reader.

Numbers: a bool is never a number; NaN, the infinities and magnitudes past ``limit`` (64 bits: no server or file
kvmon reads has wider integers) are unknown; a float with a fraction is not an int (one with none is); a negative
value is unknown, because counts, sizes, durations and rates never are, except where the field is ``signed``
(llama-server writes -1 on purpose: ``n_remain`` for "no limit", ``id_task`` for "no task"). Unknown is ``None``,
never 0. Text: lone surrogates (what a JSON ``\\ud800`` escape or an undecodable file name gives, and what no
encoder will write) become U+FFFD; a name, a version or any other text kvmon shows (``json_str``) is also made
plain (``kvmon.core.sanitize``: no control character, no bidirectional override), while text kvmon only acts on
(a command line to parse, a path to open, a URL to ask: ``json_text``) keeps every character. ``parse_json``
applies the number rules and the surrogate rule to a whole document and fails only with ``InputError``. Physical
bounds (how large a context or a rate can be) live in ``kvmon.core.bounds``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from kvmon.core.sanitize import clean_text, plain_text

MAX_INT = 2**64 - 1  # the widest integer any source writes (GGUF's uint64, llama-server's counters)
MAX_NUMBER = float(2**64)


class InputError(ValueError):
    """Input from outside (a server's body, a line of a file) that cannot be read as a value at all."""


# ------------------------------------------------------------------------------------------------ numbers


def json_float(value: Any, *, signed: bool = False, limit: float = MAX_NUMBER) -> float | None:
    """A finite number within ``limit`` (non-negative unless ``signed``) as a float, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        f = float(value)
    except OverflowError:  # an int too large for any float
        return None
    if not math.isfinite(f) or abs(f) > limit or (f < 0 and not signed):
        return None
    return f


def json_int(value: Any, *, signed: bool = False, limit: int = MAX_INT) -> int | None:
    """A whole number within ``limit`` (non-negative unless ``signed``; ``5.0`` counts) as an int, else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        if abs(value) > limit or (value < 0 and not signed):
            return None
        return value
    f = json_float(value, signed=signed, limit=float(limit))
    return int(f) if f is not None and f.is_integer() and abs(f) <= limit else None


def text_int(text: str | None, *, limit: int = MAX_INT) -> int | None:
    """Decimal digits (a log line's or a command line's number) as an int within ``limit``, else None."""
    if text is None:
        return None
    t = text.strip()
    if not t.isascii() or not t.isdigit() or len(t) > 20:
        return None
    n = int(t)
    return n if n <= limit else None


def text_float(text: str | None, *, limit: float = MAX_NUMBER) -> float | None:
    """A decimal number (``32.00``) as a finite, non-negative float within ``limit``, else None."""
    if text is None or len(text) > 64:
        return None
    try:
        f = float(text)
    except ValueError:
        return None
    return f if math.isfinite(f) and 0 <= f <= limit else None


# ------------------------------------------------------------------------------------------------ text


def json_str(value: Any) -> str | None:
    """A non-empty string as plain text (``kvmon.core.sanitize.plain_text``: what kvmon may show), else None."""
    return plain_text(value) if isinstance(value, str) and value else None


def json_text(value: Any) -> str | None:
    """A non-empty string with every character kept (lone surrogates replaced), else None: a command line, a path
    or a URL that kvmon parses, opens or asks, never shows as it is."""
    return clean_text(value) if isinstance(value, str) and value else None


# ------------------------------------------------------------------------------------------------ documents

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
# a run of 20 ASCII digits (the only digits JSON numbers have) is looked for in the bytes with every digit made "0"
# and every other byte ".": bytes.translate and a substring search are ~20× quicker than a regex on a /slots body
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= i <= 0x39 else 0x2E for i in range(256))
_TWENTY_DIGITS = b"0" * 20


def _int_or_inf(digits: str) -> int | float:
    """A JSON integer literal; one wider than 64 bits is infinite, i.e. unknown to every reader above."""
    if len(digits.lstrip("-")) <= 20:
        n = int(digits)
        if abs(n) <= MAX_INT:
            return n
    return -math.inf if digits.startswith("-") else math.inf


def _clean_tree(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [_clean_tree(v) for v in value]
    if isinstance(value, dict):
        return {clean_text(k): _clean_tree(v) for k, v in value.items()}
    return value


def parse_json(data: bytes | bytearray | memoryview | str) -> Any:
    """A JSON document from outside, as plain values under the rules above; raises InputError when it is not JSON.

    Bytes are UTF-8 (undecodable bytes replaced); integers past 64 bits are infinite; nesting deeper than the
    parser's stack is an InputError, not a RecursionError; every string, keys included, is valid text.
    """
    if isinstance(data, str):
        text = data
        raw = data.encode("utf-8", "surrogatepass")
    else:
        raw = bytes(data)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("utf-8", "replace")
    text = text.removeprefix("\ufeff")
    try:
        long_digits = _TWENTY_DIGITS in raw.translate(_DIGITS_AS_ZERO)
        value = json.loads(text, parse_int=_int_or_inf) if long_digits else json.loads(text)
        if _SURROGATE_ESCAPE.search(text):
            value = _clean_tree(value)
    except RecursionError:
        raise InputError("JSON nested too deeply to read") from None
    except ValueError as e:  # JSONDecodeError, or an integer literal too long for int()
        raise InputError(f"not JSON ({str(e)[:80]})") from None
    return value


def json_object(value: Any) -> Mapping[str, Any]:
    """A JSON object as it came, anything else (a field left out or of another type) as an empty one."""
    return value if isinstance(value, Mapping) else {}


def json_array(value: Any) -> list[Any]:
    """A JSON array as it came, anything else (a field left out or of another type) as an empty one."""
    return value if isinstance(value, list) else []
