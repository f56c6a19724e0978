"""The one build step pyproject.toml cannot declare: kvmon's resources live once, in the top-level ``resources/``
folder, and every wheel carries them inside the package (``kvmon/resources/``), where ``kvmon.resources`` finds
them at run time. Everything else about the build is in pyproject.toml."""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

RESOURCES = Path(__file__).resolve().parent / "resources"


class BuildPyWithResources(build_py):
    """``build_py``, then every file of ``resources/`` copied to ``kvmon/resources/`` in the build."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install runs from the source, which finds resources/ itself
            return
        for src in sorted(RESOURCES.rglob("*")):
            if src.is_file() and "__pycache__" not in src.parts:
                dest = Path(self.build_lib, "kvmon", "resources", src.relative_to(RESOURCES))
                self.mkpath(str(dest.parent))
                self.copy_file(str(src), str(dest))


setup(cmdclass={"build_py": BuildPyWithResources})
