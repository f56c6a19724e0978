"""What the packaging tests compare against: the files of the top-level resources/ folder, which every installation
carries inside the package (kvmon/resources/)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESOURCES = ROOT / "resources"


def resource_files() -> list[Path]:
    """Every file under resources/, sorted."""
    return sorted(p for p in RESOURCES.rglob("*")
                  if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts)


def resource_names() -> list[str]:
    """The same files as paths inside a wheel (kvmon/resources/...)."""
    return [f"kvmon/resources/{p.relative_to(RESOURCES).as_posix()}" for p in resource_files()]


def resource_sources() -> list[str]:
    """The same files as paths in the source, as an sdist holds them (resources/...)."""
    return [p.relative_to(ROOT).as_posix() for p in resource_files()]
