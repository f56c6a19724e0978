"""A module imported on first use (the standard library's ``importlib.util.LazyLoader`` recipe).

numpy costs a tenth of a second to import; the dashboard's first frame needs none of it (its stores allocate
their arrays with the first poll), so the stores name it through this.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_import(name: str) -> ModuleType:
    """``name``'s module, loaded when one of its attributes is first read (at once if it is loaded already)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
