"""kvmon's resources: one copy in the source's top-level resources/ folder, found there when kvmon runs from its
source and inside the package (importlib.resources) where it is installed; every named file there; icons, desktop
entry and metainfo valid."""

from __future__ import annotations

import configparser
import importlib.resources
import importlib.util
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import kvmon
from kvmon import resources

ROOT = Path(__file__).resolve().parent.parent
RES = ROOT / "resources"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _load_make_icons() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_icons", ROOT / "packaging" / "make-icons.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --- finding the resources ---------------------------------------------------------------------------------


def test_found_at_the_top_of_the_source_when_run_from_it() -> None:
    assert Path(str(importlib.resources.files("kvmon.resources"))) == ROOT / "kvmon" / "resources"
    assert not (ROOT / "kvmon" / "resources" / resources.MARKER).exists()  # one copy: not in the package's source
    assert resources.resources_dir() == RES
    assert resources.icon_path() == RES / "icons" / "kvmon.svg"
    assert resources.icon_path(48) == RES / "icons" / "png" / "kvmon-48.png"
    assert resources.resource_path("kvmon.desktop") == RES / "kvmon.desktop"


def test_an_installed_package_finds_them_inside_itself(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where the wheel and the bundles put them: the package's own folder (site-packages/kvmon/resources/)."""
    inside = tmp_path / "site-packages" / "kvmon" / "resources"
    shutil.copytree(RES, inside)
    monkeypatch.setattr(resources, "_files", lambda name: inside)
    assert resources.resources_dir() == inside
    assert resources.named_path("grafana") == inside / "grafana" / "kvmon-fleet.json"


def test_every_named_file_is_there() -> None:
    assert set(resources.NAMED) == {"resources", "grafana", "prometheus-rules", "desktop", "metainfo", "icon"}
    for name, relative in resources.NAMED.items():
        path = resources.named_path(name)
        assert path == RES / relative and path.exists(), name
    with pytest.raises(KeyError):
        resources.named_path("no-such-name")


def test_icon_pngs_are_the_hicolor_sizes(qapp: object) -> None:
    pngs = resources.icon_pngs()
    assert tuple(pngs) == _load_make_icons().PNG_SIZES
    assert all(p == RES / "icons" / "png" / f"kvmon-{s}.png" for s, p in pngs.items())


def test_missing_file_and_size_give_none() -> None:
    assert resources.icon_path(13) is None
    assert resources.resource_path("no/such/file.txt") is None


def test_a_package_built_without_its_data_finds_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a wheel of only the modules gave: no folder, no icon, no named file, no PNGs (and the self-test says so)."""
    monkeypatch.setattr(resources, "_files", lambda name: tmp_path)
    assert resources.resources_dir() is None
    assert resources.icon_path() is None and resources.icon_path(48) is None
    assert resources.named_path("grafana") is None
    assert resources.icon_pngs() == {}


def test_the_self_test_says_the_resources_are_missing(qapp: object, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from kvmon.gui import selftest

    monkeypatch.setattr(resources, "_files", lambda name: tmp_path)
    with pytest.raises(selftest.SelfTestError, match=r"^kvmon/resources/icons/kvmon.svg is not in this installation"):
        selftest.self_test(tmp_path / "x.png")


def test_the_dashboard_windows_get_the_packaged_icon(qapp: Any) -> None:
    from kvmon.gui import app as gui_app

    before = qapp.windowIcon()
    try:
        gui_app._set_window_icon(qapp)
        icon = qapp.windowIcon()
        assert not icon.isNull() and not icon.pixmap(48, 48).isNull()
    finally:
        qapp.setWindowIcon(before)


def test_a_zip_import_is_not_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Traversable inside a zip archive is no path Qt or a desktop entry could use: None, not a made-up path."""
    archive = tmp_path / "kvmon.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("kvmon/resources/icons/kvmon.svg", "<svg xmlns='http://www.w3.org/2000/svg'/>")
    monkeypatch.setattr(resources, "_files", lambda name: zipfile.Path(archive, "kvmon/resources/"))
    assert resources.resources_dir() is None


# --- icons ---------------------------------------------------------------------------------------------


def test_generated_icons_match_the_svg(qapp: object) -> None:
    make_icons = _load_make_icons()
    files = make_icons.build_all()
    stale = [str(p.relative_to(ROOT)) for p, data in files.items() if not p.exists() or p.read_bytes() != data]
    assert not stale, f"run packaging/make-icons.py: stale {stale}"


def test_png_sizes_render_the_icon(qapp: object) -> None:
    from PySide6.QtGui import QImage

    from kvmon.gui.selftest import image_stats

    make_icons = _load_make_icons()
    for size in make_icons.PNG_SIZES:
        img = QImage(str(make_icons.png_path(size)))
        assert (img.width(), img.height()) == (size, size)
        assert img.hasAlphaChannel()
        assert img.pixelColor(0, 0).alpha() == 0, "corners are transparent"
        assert img.pixelColor(size // 2, size // 2).alpha() == 255
        assert not image_stats(img).blank


def test_ico_holds_pngs_of_each_size() -> None:
    data = (RES / "icons" / "kvmon.ico").read_bytes()
    reserved, kind, count = struct.unpack_from("<HHH", data, 0)
    assert (reserved, kind) == (0, 1)
    sizes = []
    for i in range(count):
        w, h, _c, _r, planes, bpp, length, offset = struct.unpack_from("<BBBBHHII", data, 6 + 16 * i)
        assert (planes, bpp) == (1, 32)
        blob = data[offset:offset + length]
        assert blob.startswith(PNG_MAGIC) and len(blob) == length
        png_w, png_h = struct.unpack(">II", blob[16:24])
        assert (png_w, png_h) == ((w or 256), (h or 256))
        sizes.append(png_w)
    assert sizes == [16, 24, 32, 48, 64, 128, 256]


def test_icns_elements_are_pngs_of_the_named_size() -> None:
    data = (RES / "icons" / "kvmon.icns").read_bytes()
    assert data[:4] == b"icns" and struct.unpack(">I", data[4:8])[0] == len(data)
    pos, seen = 8, {}
    expected = {b"icp4": 16, b"icp5": 32, b"icp6": 64, b"ic07": 128, b"ic08": 256, b"ic09": 512, b"ic10": 1024}
    while pos < len(data):
        kind, length = data[pos:pos + 4], struct.unpack(">I", data[pos + 4:pos + 8])[0]
        blob = data[pos + 8:pos + length]
        assert blob.startswith(PNG_MAGIC)
        seen[kind] = struct.unpack(">I", blob[16:20])[0]
        pos += length
    assert pos == len(data)
    assert seen == expected


def test_make_icons_check_reports_stale(tmp_path: Path, qapp: object, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    make_icons = _load_make_icons()
    monkeypatch.setattr(make_icons, "PNG_DIR", tmp_path / "png")
    monkeypatch.setattr(make_icons, "ICO", tmp_path / "kvmon.ico")
    monkeypatch.setattr(make_icons, "ICNS", tmp_path / "kvmon.icns")
    monkeypatch.setattr(make_icons, "RESOURCES", tmp_path)
    assert make_icons.main(["--check"]) == 1
    assert "stale: png/kvmon-16.png" in capsys.readouterr().out
    assert make_icons.main([]) == 0
    assert make_icons.main(["--check"]) == 0


def test_invalid_svg_is_a_clear_error(tmp_path: Path, qapp: object) -> None:
    bad = tmp_path / "bad.svg"
    bad.write_text("this is not svg")
    with pytest.raises(ValueError, match="not a valid SVG"):
        _load_make_icons().render_png(bad, 16)


# --- desktop entry -------------------------------------------------------------------------------------


def _desktop() -> configparser.ConfigParser:
    cp = configparser.ConfigParser(interpolation=None, strict=True)
    cp.optionxform = str  # type: ignore[assignment,method-assign]  (keys are case-sensitive)
    cp.read(RES / "kvmon.desktop", encoding="utf-8")
    return cp


def test_desktop_entry_required_keys() -> None:
    entry = _desktop()["Desktop Entry"]
    assert entry["Type"] == "Application"
    for key in ("Name", "Comment", "Exec", "Icon", "Categories", "Terminal"):
        assert entry.get(key), key
    assert entry["Terminal"] == "false"
    assert entry["Categories"].endswith(";")
    assert "Monitor" in entry["Categories"].split(";")


def test_desktop_exec_is_the_installed_command_and_icon_exists() -> None:
    entry = _desktop()["Desktop Entry"]
    pyproject = (ROOT / "pyproject.toml").read_text()
    gui_scripts = re.search(r"^\[project\.gui-scripts\]\n((?:\w[^\n]*\n)+)", pyproject, re.M)
    assert gui_scripts is not None
    assert re.search(rf'^{re.escape(entry["Exec"].split()[0])} = "kvmon.cli:main"$', gui_scripts.group(1), re.M)
    assert entry["TryExec"] == entry["Exec"].split()[0]
    icon = entry["Icon"]
    assert "/" not in icon and not icon.endswith((".png", ".svg")), "a theme icon name, not a path"
    assert (RES / "icons" / f"{icon}.svg").is_file()
    for action in entry["Actions"].strip(";").split(";"):
        group = _desktop()[f"Desktop Action {action}"]
        assert group["Name"] and group["Exec"].split()[0] == entry["Exec"].split()[0]


@pytest.mark.skipif(shutil.which("desktop-file-validate") is None, reason="desktop-file-utils not installed")
def test_desktop_file_validate() -> None:
    out = subprocess.run(["desktop-file-validate", str(RES / "kvmon.desktop")], capture_output=True, text=True)
    assert out.returncode == 0 and not out.stdout.strip(), out.stdout + out.stderr


# --- AppStream metainfo --------------------------------------------------------------------------------


def test_metainfo_has_required_elements() -> None:
    root = ET.parse(RES / "kvmon.metainfo.xml").getroot()
    assert root.tag == "component" and root.get("type") == "desktop-application"
    cid = root.findtext("id")
    assert cid and cid.count(".") >= 2, "reverse-DNS id"
    assert root.findtext("name") == "kvmon"
    assert root.findtext("summary")
    assert root.findtext("metadata_license") == "CC0-1.0"
    assert root.findtext("project_license") == "MIT"
    desc = root.find("description")
    assert desc is not None and len(desc.findall("p")) >= 1
    launchable = root.find("launchable")
    assert launchable is not None and launchable.get("type") == "desktop-id"
    assert (RES / (launchable.text or "")).is_file()
    assert root.findtext("provides/binary") == "kvmon"


def test_metainfo_release_is_this_version() -> None:
    root = ET.parse(RES / "kvmon.metainfo.xml").getroot()
    versions = [r.get("version") for r in root.iter("release")]
    assert versions and versions[0] == kvmon.__version__


@pytest.mark.skipif(shutil.which("appstreamcli") is None, reason="appstream not installed")
def test_appstreamcli_validate() -> None:
    out = subprocess.run(["appstreamcli", "validate", "--no-net", str(RES / "kvmon.metainfo.xml")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
