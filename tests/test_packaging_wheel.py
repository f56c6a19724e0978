"""The sdist and the wheel, built from a copy of the source (offline, no build isolation), carry everything kvmon
needs; the wheel, installed into an empty folder, runs its self-test from outside the checkout with its resources
found inside itself. (packaging/python/build-and-smoke.sh does the same through pipx, with twine, in CI.)"""

from __future__ import annotations

import email
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.message import Message
from pathlib import Path

import pytest
from helpers_packaging import resource_names, resource_sources

import kvmon

ROOT = Path(__file__).resolve().parent.parent
VERSION = kvmon.__version__

pytestmark = pytest.mark.slow


def _source_copy(dest: Path) -> Path:
    """The files git tracks or would (else the tree less build output), so the build writes nothing in the checkout."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True)
    if out.returncode == 0 and out.stdout:
        for name in out.stdout.decode().split("\0"):
            if name and (ROOT / name).is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, dest / name)
    else:
        shutil.copytree(ROOT, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".ruff_cache"))
    return dest


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(sdist, wheel): the sdist from the source, then the wheel from the sdist, as `python -m build` makes them."""
    pytest.importorskip("build")
    base = tmp_path_factory.mktemp("build")
    src = _source_copy(base / "src")
    out = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(base / "dist"), str(src)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    sdist, wheel = base / "dist" / f"kvmon-{VERSION}.tar.gz", base / "dist" / f"kvmon-{VERSION}-py3-none-any.whl"
    assert sdist.is_file() and wheel.is_file()
    return sdist, wheel


def _metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as zf:
        return email.message_from_bytes(zf.read(f"kvmon-{VERSION}.dist-info/METADATA"))


def test_wheel_holds_the_package_its_resources_and_the_license(built: tuple[Path, Path]) -> None:
    names = set(zipfile.ZipFile(built[1]).namelist())
    missing = [n for n in resource_names() if n not in names]
    assert not missing, f"the wheel lacks {missing}"
    assert f"kvmon-{VERSION}.dist-info/licenses/LICENSE" in names and "kvmon/py.typed" in names
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"kvmon", f"kvmon-{VERSION}.dist-info"}, tops  # no tests, docs or build scripts in it
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "kvmon").rglob("*.py")}
    assert modules <= names, sorted(modules - names)


def test_wheel_metadata(built: tuple[Path, Path]) -> None:
    meta = _metadata(built[1])
    assert meta["Name"] == "kvmon" and meta["Version"] == VERSION
    assert meta["Metadata-Version"] >= "2.4" and meta["License-Expression"] == "MIT"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert meta["Requires-Python"] == ">=3.10" and meta["Description-Content-Type"] == "text/markdown"
    summary = meta["Summary"]
    for word in ("llama-server", "router mode", "llama-swap", "Ollama", "vLLM", "LM Studio",
                 "NVIDIA", "AMD", "Intel", "Apple Silicon", "CPU"):
        assert word in summary, word
    assert "Operating System :: POSIX :: Linux" in meta.get_all("Classifier")
    entry_points = zipfile.ZipFile(built[1]).read(f"kvmon-{VERSION}.dist-info/entry_points.txt").decode()
    assert "[gui_scripts]\nkvmon = kvmon.cli:main" in entry_points


def test_sdist_holds_the_source_to_build_and_test_from(built: tuple[Path, Path]) -> None:
    with tarfile.open(built[0]) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    missing = [n for n in resource_sources() if n not in names]
    assert not missing, f"the sdist lacks {missing}"
    for needed in ("LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml", "setup.py", "MANIFEST.in", "PKG-INFO",
                   "Makefile",
                   "tests/conftest.py", "tests/fixtures", "docs/once-json.md", "packaging/python/build-and-smoke.sh",
                   "packaging/make-icons.py", "bench/fuzz.py"):
        assert needed in names, needed
    assert not [n for n in names if "__pycache__" in n or n.startswith((".venv", "build/", "dist/"))]


def test_wheel_installed_elsewhere_finds_its_resources_and_passes_its_self_test(
        built: tuple[Path, Path], tmp_path: Path) -> None:
    """Installed into an empty folder and run from another, with no PYTHONPATH: kvmon comes from that folder, its
    resources from inside it, and the self-test renders the dashboard."""
    site = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                          "--target", str(site), str(built[1])], capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DISPLAY", "WAYLAND_DISPLAY")}
    env.update(QT_QPA_PLATFORM="offscreen", HOME=str(tmp_path), TMPDIR=str(tmp_path))
    code = (f"import sys; sys.path.insert(0, {str(site)!r}); sys.argv = ['kvmon', *sys.argv[1:]]\n"
            "import kvmon.cli\n"
            "print('kvmon from', kvmon.cli.__file__, flush=True)\n"
            "sys.exit(kvmon.cli.main())\n")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", code, *args], cwd=elsewhere, env=env, capture_output=True,
                              text=True, timeout=180)

    out = run("--print-path", "grafana")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"kvmon from {site / 'kvmon' / 'cli' / '__init__.py'}"
    assert Path(lines[1]) == site / "kvmon" / "resources" / "grafana" / "kvmon-fleet.json"
    out = run("--self-test")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[-1].startswith("kvmon self-test: OK: dashboard rendered 1280x800")
