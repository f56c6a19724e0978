"""kvmon's resources: icons, desktop entry, AppStream metainfo, the Grafana dashboard and the Prometheus rules.

Their one copy is the source's top-level ``resources/`` folder. Every installation carries them inside this package
(the wheel's build copies them here, ``setup.py``; the PyInstaller spec collects them to the same place for the
.deb, the tarball and the installers), where ``importlib.resources`` finds them; kvmon run from its source finds
the top-level folder beside the package instead. No Qt here, so the CLI and tests use it without a display.
"""

from __future__ import annotations

import importlib
from pathlib import Path

#: The file whose presence shows the folder holds kvmon's resources (a package built without its data lacks it).
MARKER = Path("icons") / "kvmon.svg"

#: The files a user may ask for by name (``kvmon --print-path NAME``), relative to the resources folder.
NAMED: dict[str, str] = {
    "resources": ".",
    "grafana": "grafana/kvmon-fleet.json",
    "prometheus-rules": "prometheus/kvmon-rules.yml",
    "desktop": "kvmon.desktop",
    "metainfo": "kvmon.metainfo.xml",
    "icon": "icons/kvmon.svg",
}


def _files(package: str) -> object:
    """``importlib.resources.files``, imported when first needed (``kvmon --version`` reads only NAMED)."""
    return importlib.import_module("importlib.resources").files(package)


def resources_dir() -> Path | None:
    """The folder on disk that holds kvmon's resources: this package's own (an installation), else the source's
    top-level ``resources/`` (kvmon run from its source); None when neither does (installed without its data, or
    imported from a zip archive, which kvmon does not support: Qt and the desktop entry need real files)."""
    root = _files(__name__)
    if not isinstance(root, Path):
        return None
    for folder in (root, root.parent.parent / "resources"):
        if (folder / MARKER).is_file():
            return folder
    return None


def resource_path(relative: str | Path) -> Path | None:
    """The path of one resource file (e.g. "icons/kvmon.svg"), or None when it cannot be found."""
    base = resources_dir()
    if base is None:
        return None
    p = base / relative
    return p if p.exists() else None


def named_path(name: str) -> Path | None:
    """The path of a resource by its name in ``NAMED`` (KeyError for another name), or None when it is missing."""
    return resource_path(NAMED[name])


def icon_path(size: int | None = None) -> Path | None:
    """The app icon: the PNG of that pixel size when given (and made), else the scalable SVG."""
    if size is not None:
        return resource_path(Path("icons") / "png" / f"kvmon-{size}.png")
    return resource_path(MARKER)


def icon_pngs() -> dict[int, Path]:
    """Every PNG size of the icon that is there, by pixel size (the hicolor theme sizes)."""
    base = resource_path(Path("icons") / "png")
    if base is None:
        return {}
    sizes: dict[int, Path] = {}
    for p in base.glob("kvmon-*.png"):
        size = p.stem.removeprefix("kvmon-")
        if size.isdigit():
            sizes[int(size)] = p
    return dict(sorted(sizes.items()))
