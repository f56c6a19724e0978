#!/usr/bin/env bash
# Build kvmon.app (PyInstaller's BUNDLE step in the same spec) and a compressed .dmg with an Applications link.
#   packaging/macos/build-dmg.sh
# Needs: macOS 12+, Python with kvmon's dependencies and pyinstaller (PYTHON, default python3), hdiutil.
# The app is not signed or notarised: set CODESIGN_IDENTITY to sign it (notarisation is a separate step).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
VERSION="$("$ROOT/packaging/print-version")"
ARCH="$(uname -m)"
APP="$ROOT/build/bundle/kvmon.app"
DMG="$ROOT/dist/kvmon-${VERSION}-macos-${ARCH}.dmg"

echo "== kvmon $VERSION: PyInstaller bundle -> $APP"
"$PYTHON" -m PyInstaller --noconfirm --clean --log-level WARN \
  --workpath "$ROOT/build/pyinstaller" --distpath "$ROOT/build/bundle" packaging/pyinstaller/kvmon.spec

if [ -n "${CODESIGN_IDENTITY:-}" ]; then
  echo "== codesign ($CODESIGN_IDENTITY)"
  codesign --force --deep --options runtime --sign "$CODESIGN_IDENTITY" "$APP"
fi

echo "== self-test of the app"
"$APP/Contents/MacOS/kvmon" --version
QT_QPA_PLATFORM=offscreen "$APP/Contents/MacOS/kvmon" --self-test

echo "== dmg -> $DMG"
STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
cp -R "$APP" "$STAGE/"
ln -s /Applications "$STAGE/Applications"
mkdir -p "$ROOT/dist"
rm -f "$DMG"
hdiutil create -volname "kvmon $VERSION" -srcfolder "$STAGE" -fs HFS+ -format UDZO -ov "$DMG"
ls -l "$DMG"
