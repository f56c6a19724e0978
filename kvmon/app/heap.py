"""Hand the memory a bulk load freed back to the system (glibc keeps freed heap otherwise; elsewhere nothing).

Reading a day's recording makes and drops 86,400 Snapshots; their memory is free but stays in the process until
``malloc_trim`` returns it, so the window's RSS after a replay opens would be its peak, not what it holds.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from functools import cache
from typing import Any


@cache
def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None  # musl has none
    except OSError:
        return None


def release_freed_memory() -> bool:
    """Return freed heap to the system where the C library can; True when it did."""
    libc = _libc()
    return bool(libc is not None and libc.malloc_trim(0))
