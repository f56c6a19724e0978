"""What the packaging tests compare against: the files of kvmon/resources that every installation must carry."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESOURCES = ROOT / "kvmon" / "resources"


def resource_files() -> list[Path]:
    """Every data file under kvmon/resources (not its Python code), sorted."""
    return sorted(p for p in RESOURCES.rglob("*")
                  if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts)


def resource_names() -> list[str]:
    """The same files as paths inside a wheel or an sdist's source tree (kvmon/resources/...)."""
    return [p.relative_to(ROOT).as_posix() for p in resource_files()]
