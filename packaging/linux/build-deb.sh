#!/usr/bin/env bash
# Build the kvmon bundle (PyInstaller, one folder), then dist/kvmon_<version>_<arch>.deb and the portable
# dist/kvmon-<version>-linux-<arch>.tar.gz from it.
#   packaging/linux/build-deb.sh                 build everything
#   SKIP_BUNDLE=1 packaging/linux/build-deb.sh   reuse build/bundle/kvmon from an earlier run
# Needs: Python with kvmon's dependencies and pyinstaller (PYTHON, default .venv/bin/python), dpkg-deb, objdump.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
DIST="$ROOT/dist"
BUILD="$ROOT/build"
BUNDLE="$BUILD/bundle/kvmon"
# zstd: ~10x faster than dpkg-deb's gzip -9 here, and smaller; every dpkg on a glibc >= 2.36 system (which the
# bundle needs anyway) reads it. COMPRESS=gzip for older tools.
COMPRESS="${COMPRESS:-zstd}"
MAX_DEB_BYTES=$((120 * 1024 * 1024))

VERSION="$("$ROOT/packaging/print-version")"
ARCH="$(dpkg --print-architecture)"
RES="$ROOT/resources"

step() { printf '\n== %s\n' "$*"; }

step "icons up to date with resources/icons/kvmon.svg"
QT_QPA_PLATFORM=offscreen "$PYTHON" packaging/make-icons.py --check

if [ "${SKIP_BUNDLE:-0}" != 1 ] || [ ! -x "$BUNDLE/kvmon" ]; then
  step "PyInstaller bundle -> $BUNDLE"
  "$PYTHON" -m PyInstaller --noconfirm --clean --log-level WARN \
    --workpath "$BUILD/pyinstaller" --distpath "$BUILD/bundle" packaging/pyinstaller/kvmon.spec
fi
"$BUNDLE/kvmon" --version

step "staging the .deb tree"
PKG="$BUILD/deb/kvmon_${VERSION}_${ARCH}"
rm -rf "$PKG"
mkdir -p "$PKG/DEBIAN" "$PKG/opt" "$PKG/usr/bin" "$PKG/usr/share/applications" "$PKG/usr/share/metainfo" \
  "$PKG/usr/share/doc/kvmon" "$PKG/usr/share/icons/hicolor/scalable/apps"
cp -a "$BUNDLE" "$PKG/opt/kvmon"
# The bootloader finds _internal/ through /proc/self/exe, so a symlink on the PATH is enough.
ln -s ../../opt/kvmon/kvmon "$PKG/usr/bin/kvmon"
install -m 0644 "$RES/kvmon.desktop" "$PKG/usr/share/applications/kvmon.desktop"
install -m 0644 "$RES/kvmon.metainfo.xml" "$PKG/usr/share/metainfo/org.kvmon.kvmon.metainfo.xml"
install -m 0644 "$RES/icons/kvmon.svg" "$PKG/usr/share/icons/hicolor/scalable/apps/kvmon.svg"
for png in "$RES"/icons/png/kvmon-*.png; do
  size="$(basename "$png" .png)"; size="${size#kvmon-}"
  install -D -m 0644 "$png" "$PKG/usr/share/icons/hicolor/${size}x${size}/apps/kvmon.png"
done
cat > "$PKG/usr/share/doc/kvmon/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: kvmon

Files: *
Copyright: kvmon developers
License: MIT

Files: opt/kvmon/_internal/*
Comment: The bundled Python runtime (PSF License), Qt 6 and PySide6 (LGPL-3.0), pyqtgraph (MIT), numpy and
 its OpenBLAS (BSD-3-Clause), httpx (BSD-3-Clause), psutil (BSD-3-Clause), gguf (MIT), nvidia-ml-py (BSD-3-Clause),
 prometheus-client (Apache-2.0), platformdirs (MIT), and shared libraries from Debian, each under its own licence.
License: various
EOF
chmod 0644 "$PKG/usr/share/doc/kvmon/copyright"
# Normalise permissions: dpkg-deb keeps what it finds.
find "$PKG" -type d -exec chmod 0755 {} +
find "$PKG/opt/kvmon" -type f ! -perm -u+x -exec chmod 0644 {} +
find "$PKG/opt/kvmon" -type f -perm -u+x -exec chmod 0755 {} +

# The newest glibc symbol version any bundled binary needs becomes the libc6 dependency.
GLIBC_MIN="$(find "$PKG/opt/kvmon" -type f \( -name '*.so*' -o -name kvmon \) -print0 \
  | xargs -0 objdump -T 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)"
# System libraries Qt's xcb/wayland platforms and fontconfig load at run time (Debian 12 names).
DEPENDS="libc6 (>= ${GLIBC_MIN:-2.28}), libegl1, libgl1, libopengl0, libglib2.0-0, libfontconfig1, libfreetype6,
 libdbus-1-3, libx11-6, libx11-xcb1, libxcb1, libxkbcommon0, libxkbcommon-x11-0, libxcb-cursor0, libxcb-icccm4,
 libxcb-image0, libxcb-keysyms1, libxcb-randr0, libxcb-render0, libxcb-render-util0, libxcb-shape0, libxcb-shm0,
 libxcb-sync1, libxcb-util1, libxcb-xfixes0, libxcb-xinerama0, libxcb-xkb1, libxrender1, fonts-dejavu-core"
DEPENDS="$(echo "$DEPENDS" | tr -d '\n' | tr -s ' ')"
INSTALLED_KB="$(du -sk --apparent-size "$PKG" | cut -f1)"
cat > "$PKG/DEBIAN/control" <<EOF
Package: kvmon
Version: ${VERSION}
Architecture: ${ARCH}
Maintainer: kvmon developers <kvmon@localhost>
Installed-Size: ${INSTALLED_KB}
Depends: ${DEPENDS}
Recommends: libwayland-client0, libwayland-cursor0, libwayland-egl1
Section: utils
Priority: optional
Description: live decode speed vs the memory-bandwidth ceiling for local LLM servers
 kvmon watches a running llama.cpp llama-server (also in router mode or behind
 llama-swap), Ollama, vLLM or LM Studio and the machine beside it: NVIDIA, AMD
 and Intel GPUs, Apple Silicon's unified memory, or the CPU and host RAM. It
 shows decode tokens per second against the speed the memory bus allows at the
 current context depth, the KV cache in use and allocated, the memory headroom
 of every device, a forecast of the slowdown ahead, and warnings before the
 cache or the model spills out of VRAM. A built-in simulated server
 (kvmon --demo) lets you try it without a model.
EOF

step "dpkg-deb ($COMPRESS)"
mkdir -p "$DIST"
DEB="$DIST/kvmon_${VERSION}_${ARCH}.deb"
rm -f "$DEB"
dpkg-deb --root-owner-group -Z"$COMPRESS" --build "$PKG" "$DEB"
deb_bytes="$(stat -c %s "$DEB")"
echo "$DEB: $((deb_bytes / 1024 / 1024)) MiB (installed ${INSTALLED_KB} KiB)"
if [ "$deb_bytes" -gt "$MAX_DEB_BYTES" ]; then
  echo "build-deb: $DEB is larger than 120 MiB" >&2
  exit 1
fi

step "portable tarball"
TARBALL="$DIST/kvmon-${VERSION}-linux-${ARCH}.tar.gz"
TAR_TREE="$BUILD/tar/kvmon-${VERSION}"
rm -rf "$BUILD/tar"
mkdir -p "$TAR_TREE"
cp -a "$BUNDLE/." "$TAR_TREE/"
tar -C "$BUILD/tar" --owner=0 --group=0 -czf "$TARBALL" "kvmon-${VERSION}"
echo "$TARBALL: $(( $(stat -c %s "$TARBALL") / 1024 / 1024 )) MiB"
