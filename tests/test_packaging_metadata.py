"""One version number everywhere (the package, --version, the .deb, the tarball, the installers, the metainfo, the
changelog) and package metadata that tells the truth (every backend and platform, valid classifiers, the license)."""

from __future__ import annotations

import re
import subprocess
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

import kvmon
from kvmon import cli
from kvmon.cli import desktop

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"
VERSION = kvmon.__version__
BACKENDS = ("llama-server", "Ollama", "vLLM", "LM Studio")


def _pyproject() -> dict[str, Any]:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


# --- one version ------------------------------------------------------------------------------------------


def test_version_is_single_sourced_from_the_package() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION)
    data = _pyproject()
    assert "version" not in data["project"] and "version" in data["project"]["dynamic"]
    assert data["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "kvmon.__version__"}
    text = (ROOT / "kvmon" / "__init__.py").read_text()
    assert text.count("__version__") == 1 and f'__version__ = "{VERSION}"' in text.splitlines()


def test_installed_metadata_and_version_flag_agree(capsys: pytest.CaptureFixture[str]) -> None:
    """The distribution this kvmon was installed from says the same version (make re-installs when it changes)."""
    installed = [d for d in metadata.distributions(name="kvmon") if desktop._provides_running_kvmon(d)]
    assert installed, "kvmon is not installed (pip install -e '.[test]')"
    assert {d.version for d in installed} == {VERSION}
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"kvmon {VERSION}"
    assert "kvmon/__init__.py" in (ROOT / "Makefile").read_text().split("$(STAMP):", 1)[1].splitlines()[0]


def test_build_scripts_take_the_version_from_print_version() -> None:
    out = subprocess.run([str(PACKAGING / "print-version")], capture_output=True, text=True, check=True)
    assert out.stdout == VERSION + "\n"
    for script in ("linux/build-deb.sh", "linux/build-and-smoke.sh", "macos/build-dmg.sh", "python/build-and-smoke.sh"):
        text = (PACKAGING / script).read_text()
        assert 'VERSION="$("$ROOT/packaging/print-version")"' in text, script
        assert "__version__" not in text and VERSION not in text, f"{script} restates the version"
    deb = (PACKAGING / "linux" / "build-deb.sh").read_text()
    assert "Version: ${VERSION}" in deb  # the .deb's control file
    assert 'TARBALL="$DIST/kvmon-${VERSION}-linux-${ARCH}.tar.gz"' in deb


def test_windows_installer_takes_the_version_from_the_build_script() -> None:
    ps1 = (PACKAGING / "windows" / "build.ps1").read_text()
    pattern = re.search(r"-Pattern '([^']+)'", ps1)
    assert pattern is not None and 'Path "kvmon\\__init__.py"' in ps1
    found = re.search(pattern.group(1), (ROOT / "kvmon" / "__init__.py").read_text(), re.M)
    assert found is not None and found.group(1) == VERSION  # PowerShell's regex reads the same line
    assert '"/DAppVersion=$Version"' in ps1
    iss = (PACKAGING / "windows" / "kvmon.iss").read_text()
    assert "#error" in iss.split("#ifndef AppVersion", 1)[1].split("#endif", 1)[0], "no default version to go stale"
    assert not re.search(r"\b\d+\.\d+\.\d+\b", iss), "the installer restates a version"
    assert "OutputBaseFilename=kvmon-{#AppVersion}-windows-x64-setup" in iss


def _changelog_versions() -> list[tuple[str, str]]:
    text = (ROOT / "CHANGELOG.md").read_text()
    return re.findall(r"^## (\d+\.\d+\.\d+) — (\d{4}-\d{2}-\d{2})$", text, re.M)


def test_changelog_and_metainfo_list_the_same_releases() -> None:
    changelog = _changelog_versions()
    assert changelog and changelog[0][0] == VERSION, "CHANGELOG.md's newest entry is this version"
    root = ET.parse(ROOT / "resources" / "kvmon.metainfo.xml").getroot()
    releases = [(r.get("version"), r.get("date")) for r in root.iter("release")]
    assert releases == changelog
    assert [v for v, _ in changelog] == sorted((v for v, _ in changelog),
                                              key=lambda v: tuple(map(int, v.split("."))), reverse=True)


# --- metadata that tells the truth ------------------------------------------------------------------------


def test_description_and_keywords_name_every_backend_and_platform() -> None:
    project = _pyproject()["project"]
    description = project["description"]
    for word in (*BACKENDS, "router mode", "llama-swap", "NVIDIA", "AMD", "Intel", "Apple Silicon", "CPU"):
        assert word in description, word
    keywords = set(project["keywords"])
    for word in ("llama.cpp", "llama-server", "router-mode", "llama-swap", "ollama", "vllm", "lm-studio",
                 "nvidia", "amd", "intel", "apple-silicon", "cpu"):
        assert word in keywords, word


def test_classifiers_are_valid_and_cover_the_platforms() -> None:
    trove = pytest.importorskip("trove_classifiers")
    classifiers = _pyproject()["project"]["classifiers"]
    unknown = [c for c in classifiers if c not in trove.classifiers]
    assert not unknown, f"not PyPI classifiers: {unknown}"
    assert len(set(classifiers)) == len(classifiers)
    for needed in ("Operating System :: POSIX :: Linux", "Operating System :: MacOS",
                   "Operating System :: Microsoft :: Windows", "Environment :: GPU",
                   "Topic :: System :: Monitoring", "Typing :: Typed"):
        assert needed in classifiers, needed
    assert not [c for c in classifiers if c.startswith("License ::")], "the license is the SPDX expression"
    requires = _pyproject()["project"]["requires-python"]
    lowest = re.fullmatch(r">=3\.(\d+)", requires)
    versions = sorted(int(c.rsplit(".", 1)[1]) for c in classifiers if re.fullmatch(r".*Python :: 3\.\d+", c))
    assert lowest is not None and versions[0] == int(lowest.group(1)), "classifiers start at requires-python"


def test_license_file_ships() -> None:
    project = _pyproject()["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")


def test_every_description_names_every_backend() -> None:
    """The desktop entry, the metainfo, the .deb and the Windows installer say what kvmon watches, all of it."""
    res = ROOT / "resources"
    comment = re.search(r"^Comment=(.*)$", (res / "kvmon.desktop").read_text(), re.M)
    metainfo = ET.parse(res / "kvmon.metainfo.xml").getroot().find("description")
    deb = re.search(r"^Description: .*?(?=^EOF$)", (PACKAGING / "linux" / "build-deb.sh").read_text(), re.M | re.S)
    iss = re.search(r"^AppComments=(.*)$", (PACKAGING / "windows" / "kvmon.iss").read_text(), re.M)
    assert comment and metainfo is not None and deb and iss
    texts = {"desktop": comment.group(1), "metainfo": " ".join(metainfo.itertext()),
             "deb": " ".join(deb.group(0).split()), "iss": iss.group(1)}
    for where, text in texts.items():
        for backend in BACKENDS:
            assert backend in text, (where, backend)
