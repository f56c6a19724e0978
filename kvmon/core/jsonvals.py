"""JSON values as the numbers and strings they stand for: one rule for every reader of a server's JSON.

A bool is never a number; NaN and the infinities are unknown; a float with a fraction is not an int (one with
none is); a negative value is unknown, because counts, sizes, durations and rates never are, except where the
field is ``signed`` (llama-server writes -1 on purpose: ``n_remain`` for "no limit", ``id_task`` for "no task").
Unknown is ``None``, never 0. Used by the server sources and by ``kvmon proxy``.
"""

from __future__ import annotations

import math
from typing import Any


def json_float(value: Any, *, signed: bool = False) -> float | None:
    """A finite number (non-negative unless ``signed``) as a float, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    f = float(value)
    if not math.isfinite(f) or (f < 0 and not signed):
        return None
    return f


def json_int(value: Any, *, signed: bool = False) -> int | None:
    """A whole number (non-negative unless ``signed``; ``5.0`` counts) as an int, else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if signed or value >= 0 else None
    f = json_float(value, signed=signed)
    return int(f) if f is not None and f.is_integer() else None


def json_str(value: Any) -> str | None:
    """A non-empty string, else None."""
    return value if isinstance(value, str) and value else None
