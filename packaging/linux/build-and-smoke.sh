#!/usr/bin/env bash
# One command: build the bundle, the .deb and the tarball, install the .deb with apt (resolving its Depends),
# then check the installed kvmon: --version, --self-test (offscreen), the desktop entry, icons and metainfo;
# and the portable tarball's --self-test. Run as root (or with sudo available) on Debian 12 or newer.
#   packaging/linux/build-and-smoke.sh                 build + install + check
#   SKIP_BUILD=1 packaging/linux/build-and-smoke.sh    check the dist/ .deb from an earlier build
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
VERSION="$("$ROOT/packaging/print-version")"
ARCH="$(dpkg --print-architecture)"
DEB="$ROOT/dist/kvmon_${VERSION}_${ARCH}.deb"
TARBALL="$ROOT/dist/kvmon-${VERSION}-linux-${ARCH}.tar.gz"
export DEBIAN_FRONTEND=noninteractive

SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "build-and-smoke: run as root or install sudo" >&2; exit 1; }
  SUDO="sudo"
fi

t0=$SECONDS
step() { printf '\n== [%4ds] %s\n' "$((SECONDS - t0))" "$*"; }
fail() { echo "build-and-smoke: FAIL: $*" >&2; exit 1; }

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  step "build: bundle, .deb, tarball"
  packaging/linux/build-deb.sh
fi
build_s=$((SECONDS - t0))
[ -f "$DEB" ] || fail "$DEB was not built"

step "apt-get install $DEB"
if ! $SUDO apt-get install -y -q --no-install-recommends "$DEB"; then
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "$DEB"
fi
dpkg-query -W -f='${Status} ${Version}\n' kvmon | grep -q "install ok installed $VERSION" \
  || fail "dpkg does not list kvmon $VERSION as installed"

# Run the installed program from a neutral place, with nothing pointing back at the checkout.
SMOKE="$(mktemp -d)"
trap 'rm -rf "$SMOKE"' EXIT
run_clean() { (cd "$SMOKE" && env -u PYTHONPATH -u DISPLAY -u WAYLAND_DISPLAY \
  QT_QPA_PLATFORM=offscreen HOME="$SMOKE" "$@"); }

step "installed kvmon --version"
[ "$(command -v kvmon)" = /usr/bin/kvmon ] || fail "kvmon on the PATH is $(command -v kvmon || echo nothing)"
got="$(run_clean kvmon --version)"
[ "$got" = "kvmon $VERSION" ] || fail "kvmon --version printed '$got'"
echo "$got"

step "installed kvmon --self-test"
run_clean kvmon --self-test || fail "the installed kvmon failed its self-test"

if command -v xvfb-run >/dev/null; then
  step "installed kvmon --self-test on a real X server (Xvfb: the xcb platform and the Depends libraries)"
  (cd "$SMOKE" && env -u QT_QPA_PLATFORM -u PYTHONPATH HOME="$SMOKE" \
    xvfb-run -a -s "-screen 0 1280x800x24" kvmon --self-test) || fail "the installed kvmon failed its self-test on X"
else
  echo "xvfb-run not available: the X11 (xcb) self-test is skipped"
fi

step "desktop entry, icons, metainfo"
desktop=/usr/share/applications/kvmon.desktop
metainfo=/usr/share/metainfo/org.kvmon.kvmon.metainfo.xml
[ -f "$desktop" ] || fail "$desktop not installed"
[ -f "$metainfo" ] || fail "$metainfo not installed"
icon_name="$(sed -n 's/^Icon=//p' "$desktop" | head -1)"
exec_bin="$(sed -n 's/^Exec=\([^ ]*\).*/\1/p' "$desktop" | head -1)"
command -v "$exec_bin" >/dev/null || fail "the desktop entry's Exec ($exec_bin) is not on the PATH"
for size in 16 22 24 32 48 64 128 256 512; do
  [ -f "/usr/share/icons/hicolor/${size}x${size}/apps/${icon_name}.png" ] || fail "no ${size}px icon '$icon_name'"
done
[ -f "/usr/share/icons/hicolor/scalable/apps/${icon_name}.svg" ] || fail "no scalable icon '$icon_name'"
if ! command -v desktop-file-validate >/dev/null || ! command -v appstreamcli >/dev/null; then
  $SUDO apt-get install -y -q --no-install-recommends desktop-file-utils appstream >/dev/null 2>&1 || true
fi
if command -v desktop-file-validate >/dev/null; then
  desktop-file-validate "$desktop" || fail "desktop-file-validate rejects $desktop"
  echo "desktop-file-validate: ok"
else
  echo "desktop-file-validate: not available, skipped"
fi
if command -v appstreamcli >/dev/null; then
  appstreamcli validate --no-net "$metainfo" || fail "appstreamcli rejects $metainfo"
else
  echo "appstreamcli: not available, skipped"
fi

step "installed kvmon --print-path: the Grafana dashboard and Prometheus rules ship with it"
for name in grafana prometheus-rules; do
  path="$(run_clean kvmon --print-path "$name")" || fail "kvmon --print-path $name failed"
  case "$path" in /opt/kvmon/*) ;; *) fail "kvmon --print-path $name points outside the bundle: $path" ;; esac
  [ -s "$path" ] || fail "kvmon --print-path $name: $path is missing or empty"
  echo "$name: $path"
done

step "portable tarball --self-test"
[ -f "$TARBALL" ] || fail "$TARBALL was not built"
tar -C "$SMOKE" -xzf "$TARBALL"
TAR_KVMON="$SMOKE/kvmon-${VERSION}/kvmon"
run_clean "$TAR_KVMON" --self-test || fail "the tarball's kvmon failed its self-test"

step "portable tarball --install-desktop / --uninstall-desktop (a throw-away XDG data folder)"
XDG="$SMOKE/xdg-data"
run_clean env XDG_DATA_HOME="$XDG" "$TAR_KVMON" --install-desktop || fail "the tarball's --install-desktop failed"
entry="$XDG/applications/kvmon.desktop"
grep -qx "Exec=$TAR_KVMON" "$entry" || fail "$entry does not run $TAR_KVMON: $(grep '^Exec=' "$entry" | head -1)"
[ -f "$XDG/icons/hicolor/48x48/apps/kvmon.png" ] || fail "--install-desktop wrote no 48px icon"
if command -v desktop-file-validate >/dev/null; then
  desktop-file-validate "$entry" || fail "desktop-file-validate rejects $entry"
fi
run_clean env XDG_DATA_HOME="$XDG" "$TAR_KVMON" --uninstall-desktop || fail "the tarball's --uninstall-desktop failed"
left="$(find "$XDG" -name 'kvmon*')"
[ -z "$left" ] || fail "--uninstall-desktop left: $left"

step "done"
echo "kvmon $VERSION: .deb $(( $(stat -c %s "$DEB") / 1024 / 1024 )) MiB, tarball" \
  "$(( $(stat -c %s "$TARBALL") / 1024 / 1024 )) MiB; build ${build_s}s, total $((SECONDS - t0))s; installed and" \
  "self-tested (remove with: apt-get remove kvmon)"
