#!/usr/bin/env python3
"""Render resources/icons/kvmon.svg into the hicolor PNG sizes, a Windows .ico and a macOS .icns.

The PNGs are drawn with Qt's own SVG renderer (QtSvg ships in PySide6-Essentials); the .ico and .icns
are written here in pure Python because both formats can simply wrap PNG images.
Run it after editing the SVG:  python packaging/make-icons.py   (add --check to verify, not write).
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
from pathlib import Path

#: The resources folder at the top of the source, where the icons live (and ship in the wheel and packages from).
RESOURCES = Path(__file__).resolve().parent.parent / "resources"
SVG = RESOURCES / "icons" / "kvmon.svg"
PNG_DIR = RESOURCES / "icons" / "png"
ICO = RESOURCES / "icons" / "kvmon.ico"
ICNS = RESOURCES / "icons" / "kvmon.icns"

#: The hicolor theme sizes installed on Linux.
PNG_SIZES: tuple[int, ...] = (16, 22, 24, 32, 48, 64, 128, 256, 512)
#: Images packed into the Windows .ico (256 is the largest the format describes).
ICO_SIZES: tuple[int, ...] = (16, 24, 32, 48, 64, 128, 256)
#: ICNS element types that hold a PNG of the given pixel size.
ICNS_TYPES: tuple[tuple[bytes, int], ...] = (
    (b"icp4", 16), (b"icp5", 32), (b"icp6", 64), (b"ic07", 128), (b"ic08", 256), (b"ic09", 512), (b"ic10", 1024),
)


def png_path(size: int) -> Path:
    """Where the PNG of one size lives in the source tree."""
    return PNG_DIR / f"kvmon-{size}.png"


def render_png(svg_path: Path, size: int) -> bytes:
    """The SVG drawn at size x size pixels on a transparent background, as PNG bytes."""
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice
    from PySide6.QtGui import QColor, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(svg_path))
    if not renderer.isValid():
        raise ValueError(f"{svg_path} is not a valid SVG")
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(QColor(0, 0, 0, 0))
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter)
    painter.end()
    data = QByteArray()
    buf = QBuffer(data)
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buf, "PNG")
    buf.close()
    return bytes(data.data())


def build_ico(pngs: dict[int, bytes]) -> bytes:
    """A .ico whose entries are PNG images (supported by Windows since Vista)."""
    sizes = sorted(pngs)
    header = struct.pack("<HHH", 0, 1, len(sizes))
    offset = 6 + 16 * len(sizes)
    entries = b""
    blobs = b""
    for s in sizes:
        blob = pngs[s]
        dim = 0 if s >= 256 else s  # 0 means 256 in the directory entry
        entries += struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(blob), offset)
        blobs += blob
        offset += len(blob)
    return header + entries + blobs


def build_icns(pngs: dict[int, bytes]) -> bytes:
    """An .icns made of PNG elements, one per ICNS type whose size we have."""
    body = b""
    for kind, s in ICNS_TYPES:
        if s in pngs:
            body += kind + struct.pack(">I", 8 + len(pngs[s])) + pngs[s]
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def build_all(svg_path: Path = SVG) -> dict[Path, bytes]:
    """Every generated file's path and contents, rendered from the SVG."""
    needed = sorted(set(PNG_SIZES) | set(ICO_SIZES) | {s for _, s in ICNS_TYPES})
    rendered = {s: render_png(svg_path, s) for s in needed}
    out: dict[Path, bytes] = {png_path(s): rendered[s] for s in PNG_SIZES}
    out[ICO] = build_ico({s: rendered[s] for s in ICO_SIZES})
    out[ICNS] = build_icns(rendered)
    return out


def main(argv: list[str] | None = None) -> int:
    """Write (or with --check, compare) the generated icons; exit 1 when --check finds them stale."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="only report files that differ from the SVG")
    args = parser.parse_args(argv)

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    _app = QGuiApplication.instance() or QGuiApplication([sys.argv[0]])
    files = build_all()
    stale = [p for p, data in files.items() if not p.exists() or p.read_bytes() != data]
    if args.check:
        for p in stale:
            print(f"stale: {p.relative_to(RESOURCES)}")
        return 1 if stale else 0
    PNG_DIR.mkdir(parents=True, exist_ok=True)
    for p, data in files.items():
        p.write_bytes(data)
        print(f"wrote {p.relative_to(RESOURCES)} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
