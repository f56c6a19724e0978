"""numpy is loaded with the first poll, not with the window's first frame: the stores name it lazily."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kvmon.core.lazy import lazy_import

SCRIPT = """
import sys
import kvmon.core.history, kvmon.core.points
print(type(sys.modules["numpy"]).__name__)
kvmon.core.history.History()
import numpy
numpy.zeros(1)
print(type(sys.modules["numpy"]).__name__)
"""


def test_importing_the_stores_leaves_numpy_unloaded_until_it_is_used() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["_LazyModule", "module"]


def test_a_module_that_is_not_there_is_said_at_once() -> None:
    with pytest.raises(ModuleNotFoundError, match="no_such_module_here"):
        lazy_import("no_such_module_here")
