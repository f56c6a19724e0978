"""Find kvmon's resources/ folder (icons, desktop entry, metainfo) wherever kvmon runs from.

Looked up in order: $KVMON_RESOURCES, a PyInstaller bundle (sys._MEIPASS/resources), a source checkout
(resources/ beside the kvmon package), an installed data dir (<prefix>/share/kvmon/resources).
No Qt here, so the CLI and tests can use it without a display.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

#: The file whose presence marks a folder as kvmon's resources/.
MARKER = Path("icons") / "kvmon.svg"
ENV_VAR = "KVMON_RESOURCES"


def candidate_dirs() -> Iterator[Path]:
    """Every place resources/ may be, most specific first."""
    override = os.environ.get(ENV_VAR)
    if override:
        yield Path(override)
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        yield Path(bundle) / "resources"
    yield Path(__file__).resolve().parent.parent / "resources"
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix)):
        yield Path(prefix) / "share" / "kvmon" / "resources"


def resources_dir() -> Path | None:
    """The first candidate folder that holds kvmon's icon, or None when kvmon was installed without it."""
    for d in candidate_dirs():
        if (d / MARKER).is_file():
            return d
    return None


def resource_path(relative: str | Path) -> Path | None:
    """The path of one resource file (e.g. "icons/kvmon.svg"), or None when it cannot be found."""
    base = resources_dir()
    if base is None:
        return None
    p = base / relative
    return p if p.exists() else None


def icon_path(size: int | None = None) -> Path | None:
    """The app icon: the PNG of that pixel size when given (and made), else the scalable SVG."""
    if size is not None:
        return resource_path(Path("icons") / "png" / f"kvmon-{size}.png")
    return resource_path(MARKER)
