#!/usr/bin/env bash
# Build kvmon's sdist and wheel, check them with twine, then install the wheel the way its users do (pipx, into a
# fresh PIPX_HOME and PIPX_BIN_DIR in a temporary folder) and run that kvmon from outside the checkout with a clean
# environment (no PYTHONPATH, a throw-away HOME): --version, --self-test, --print-path, `once` against `kvmon sim`,
# `screenshot --demo`, --install-desktop / --uninstall-desktop; then pipx uninstall, and check nothing is left.
#   packaging/python/build-and-smoke.sh                  build + install + check
#   SKIP_BUILD=1 packaging/python/build-and-smoke.sh     check the wheel in dist/ from an earlier build
#   BUILD_ISOLATION=0 ...                                build with PYTHON's own setuptools (offline)
# Needs: PYTHON (default .venv/bin/python) with build, twine and pipx (pip install -e '.[package]'); SMOKE_PYTHON
# (default: python3 on the PATH) for the virtual environment pipx makes; the package index for kvmon's dependencies.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PYTHON="$(cd "$ROOT" && realpath -s "${PYTHON:-.venv/bin/python}")"  # absolute: the checks run from elsewhere
# The interpreter itself, not a wrapper on the PATH (pyenv's shims): pipx builds kvmon's environment on it.
SMOKE_PYTHON="$("${SMOKE_PYTHON:-python3}" -c 'import sys; print(sys.executable)')"
VERSION="$("$ROOT/packaging/print-version")"
DIST="$ROOT/dist"
SDIST="$DIST/kvmon-${VERSION}.tar.gz"
WHEEL="$DIST/kvmon-${VERSION}-py3-none-any.whl"
SHOT_SIZE="1280x800"  # what `kvmon screenshot` writes for the whole window, caption included

t0=$SECONDS
step() { printf '\n== [%4ds] %s\n' "$((SECONDS - t0))" "$*"; }
fail() { echo "python build-and-smoke: FAIL: $*" >&2; exit 1; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kvmon-wheel-smoke.XXXXXX")"
SIM_PID=""
cleanup() {
  if [ -n "$SIM_PID" ]; then kill "$SIM_PID" 2>/dev/null || true; wait "$SIM_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  step "build the sdist, then the wheel from it ($DIST)"
  rm -f "$SDIST" "$WHEEL"
  isolation=()
  [ "${BUILD_ISOLATION:-1}" = 1 ] || isolation=(--no-isolation)
  "$PYTHON" -m build "${isolation[@]}" --outdir "$DIST" "$ROOT" >"$WORK/build.log" 2>&1 \
    || { tail -40 "$WORK/build.log" >&2; fail "python -m build failed"; }
fi
build_s=$((SECONDS - t0))
[ -f "$SDIST" ] || fail "$SDIST was not built"
[ -f "$WHEEL" ] || fail "$WHEEL was not built"

step "twine check --strict"
"$PYTHON" -m twine check --strict "$SDIST" "$WHEEL"

step "the wheel and the sdist carry every resource file"
"$PYTHON" - "$ROOT" "$SDIST" "$WHEEL" <<'EOF'
import sys, tarfile, zipfile
from pathlib import Path
root, sdist, wheel = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
res = root / "resources"  # one copy, at the top of the source; the wheel has it inside the package
want = sorted(p.relative_to(res).as_posix() for p in res.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
in_wheel = set(zipfile.ZipFile(wheel).namelist())
with tarfile.open(sdist) as tf:
    prefix = tf.getnames()[0].split("/")[0]
    in_sdist = {n.removeprefix(prefix + "/") for n in tf.getnames()}
missing = ([f"wheel: kvmon/resources/{w}" for w in want if f"kvmon/resources/{w}" not in in_wheel]
           + [f"sdist: resources/{w}" for w in want if f"resources/{w}" not in in_sdist])
if missing or "LICENSE" not in in_sdist or not any(n.endswith("/licenses/LICENSE") for n in in_wheel):
    sys.exit("missing: " + ", ".join(missing or ["LICENSE"]))
print(f"{len(want)} resource files in both; wheel {Path(wheel).stat().st_size // 1024} KiB, "
      f"sdist {Path(sdist).stat().st_size // 1024} KiB")
EOF

# pipx in a temporary folder, the way a user's own would be; kvmon runs from an empty directory with a minimal
# environment (env -i): nothing can point back at the checkout.
export PIPX_HOME="$WORK/pipx/home" PIPX_BIN_DIR="$WORK/pipx/bin" PIPX_MAN_DIR="$WORK/pipx/man"
mkdir -p "$WORK/cwd" "$WORK/home" "$WORK/tmp"
VENV="$PIPX_HOME/venvs/kvmon"
CLEAN_ENV=(env -i -C "$WORK/cwd" PATH="$PIPX_BIN_DIR:/usr/local/bin:/usr/bin:/bin" HOME="$WORK/home"
  TMPDIR="$WORK/tmp" LANG=C.UTF-8 QT_QPA_PLATFORM=offscreen)
run_clean() { "${CLEAN_ENV[@]}" "$@"; }

step "pipx install $(basename "$WHEEL") (python: $SMOKE_PYTHON)"
pipx_t0=$SECONDS
(cd "$WORK/cwd" && env -u PYTHONPATH "$PYTHON" -m pipx install --python "$SMOKE_PYTHON" "$WHEEL")
install_s=$((SECONDS - pipx_t0))
[ -x "$PIPX_BIN_DIR/kvmon" ] || fail "pipx put no kvmon in $PIPX_BIN_DIR"

step "kvmon --version"
[ "$(run_clean sh -c 'command -v kvmon')" = "$PIPX_BIN_DIR/kvmon" ] || fail "kvmon on the PATH is not pipx's"
got="$(run_clean kvmon --version)"
[ "$got" = "kvmon $VERSION" ] || fail "kvmon --version printed '$got'"
echo "$got"

step "kvmon --self-test"
run_clean kvmon --self-test || fail "the pipx-installed kvmon failed its self-test"

step "kvmon --print-path: resources inside the pipx environment"
for name in resources grafana prometheus-rules; do
  path="$(run_clean kvmon --print-path "$name")" || fail "kvmon --print-path $name failed"
  case "$path" in "$VENV"/*) ;; *) fail "kvmon --print-path $name is outside $VENV: $path" ;; esac
  [ -e "$path" ] || fail "kvmon --print-path $name: $path is not there"
  echo "$name: $path"
done

step "kvmon once --json against kvmon sim (both the installed kvmon)"
(exec "${CLEAN_ENV[@]}" kvmon sim --port 0 >"$WORK/sim.out" 2>"$WORK/sim.err") &
SIM_PID=$!  # kvmon's own PID (exec, then env execs kvmon), so that SIGTERM reaches it
URL=""
for _ in $(seq 1 300); do
  URL="$(sed -n 's|.* at \(http://127\.0\.0\.1:[0-9]*\) .*|\1|p' "$WORK/sim.out" | head -1)"
  [ -n "$URL" ] && break
  kill -0 "$SIM_PID" 2>/dev/null || { cat "$WORK/sim.err" >&2; fail "kvmon sim exited before it listened"; }
  sleep 0.1
done
[ -n "$URL" ] || fail "kvmon sim printed no URL in 30 s"
# The simulated server's GPUs live in the simulator's process: kvmon learns where the model sits from its log.
LOG="$(sed -n 's|^  server log (kvmon --log): ||p' "$WORK/sim.out" | head -1)"
echo "kvmon sim listens at $URL (log $LOG)"
run_clean kvmon once "$URL" --log "$LOG" --json >"$WORK/once.json" || fail "kvmon once $URL --json failed"
"$SMOKE_PYTHON" - "$WORK/once.json" "$VERSION" "$URL" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
want = {"kvmon_version": sys.argv[2], "backend": "llama-server", "url": sys.argv[3]}
bad = {k: doc.get(k) for k, v in want.items() if doc.get(k) != v}
model, ceiling, eff = doc.get("model") or {}, doc.get("ceiling_tok_s"), doc.get("efficiency")
gpus = [g.get("log_name") for g in doc.get("gpus") or []]
# seed-3090x2: two RTX 3090s named by the log; a decode speed (when the chat is decoding) under the ceiling
if bad or not model.get("name") or not model.get("kv_bytes_per_token") or not ceiling or gpus != ["CUDA0", "CUDA1"] \
        or (doc.get("decode_tok_s") is not None and not (eff and 0 < eff <= 1)):
    sys.exit(f"once --json: unexpected {bad or doc}")
decode = doc.get("decode_tok_s")
decode_text = f"{decode:.1f} tok/s ({eff:.0%})" if decode is not None else f"— ({doc['reasons'].get('decode_tok_s')})"
print(f"once: {doc['backend']} {model['name']} on {', '.join(gpus)}, ceiling {ceiling:.1f} tok/s, decode "
      f"{decode_text}, KV {model['kv_bytes_per_token']:.0f} B/token")
EOF
kill -TERM "$SIM_PID"
sim_status=0
wait "$SIM_PID" || sim_status=$?
SIM_PID=""
[ "$sim_status" = 0 ] || fail "kvmon sim exited with status $sim_status on SIGTERM"

step "kvmon screenshot --demo"
run_clean kvmon screenshot --demo --after 3 -o "$WORK/shot.png" || fail "kvmon screenshot --demo failed"
# Decoded with the installed kvmon's own Qt: a real PNG of the window's size, not a blank one.
run_clean "$VENV/bin/python" - "$WORK/shot.png" "$SHOT_SIZE" <<'EOF' || fail "the screenshot is not a whole image"
import sys
from PySide6.QtGui import QGuiApplication, QImage
from kvmon.gui.selftest import image_stats
app = QGuiApplication([])
img = QImage(sys.argv[1])
stats = image_stats(img)
size = f"{stats.width}x{stats.height}"
if img.isNull() or size != sys.argv[2] or stats.blank:
    sys.exit(f"screenshot: {size}, blank={stats.blank} (want {sys.argv[2]}, not blank)")
print(f"screenshot: PNG {size}, {stats.distinct_colours} colours, grey sd {stats.grey_sd:.1f}")
EOF

step "kvmon --install-desktop / --uninstall-desktop (a throw-away XDG data folder)"
XDG="$WORK/xdg-data"
run_clean env XDG_DATA_HOME="$XDG" kvmon --install-desktop || fail "--install-desktop failed"
entry="$XDG/applications/kvmon.desktop"
exec_line="$(grep -m1 '^Exec=' "$entry")"
[ "$exec_line" = "Exec=$VENV/bin/kvmon" ] || fail "the entry runs '${exec_line#Exec=}', not $VENV/bin/kvmon"
run_clean "${exec_line#Exec=}" --version >/dev/null || fail "the entry's Exec does not run"
for icon in 16x16/apps/kvmon.png 48x48/apps/kvmon.png 512x512/apps/kvmon.png scalable/apps/kvmon.svg; do
  [ -s "$XDG/icons/hicolor/$icon" ] || fail "--install-desktop wrote no $icon"
done
if command -v desktop-file-validate >/dev/null; then
  desktop-file-validate "$entry" || fail "desktop-file-validate rejects $entry"
  echo "desktop-file-validate: ok"
else
  echo "desktop-file-validate: not installed, skipped"
fi
run_clean env XDG_DATA_HOME="$XDG" kvmon --uninstall-desktop || fail "--uninstall-desktop failed"
left="$(find "$XDG" -name 'kvmon*')"
[ -z "$left" ] || fail "--uninstall-desktop left: $left"

step "pipx uninstall kvmon"
(cd "$WORK/cwd" && "$PYTHON" -m pipx uninstall kvmon)
[ ! -e "$VENV" ] || fail "pipx uninstall left $VENV"
# (pipx keeps its own lock file, .kvmon.lock, beside the environments it made)
left="$(find "$PIPX_BIN_DIR" "$PIPX_MAN_DIR" "$PIPX_HOME/venvs" -mindepth 1 ! -name .kvmon.lock 2>/dev/null || true)"
[ -z "$left" ] || fail "pipx uninstall left: $left"
# What kvmon wrote as the user's data is theirs to keep (pipx leaves it too): its settings folder, where `once` put
# the host RAM bandwidth it measured, and its data folder's atlas of measured curves, where `once` filed the speed it
# measured at that depth. Anything else in HOME or the working directory would be litter.
kept="$WORK/home/.config/kvmon/host_bandwidth.json"
atlas="$WORK/home/.local/share/kvmon/atlas.sqlite"
left="$(find "$WORK/home" "$WORK/cwd" -mindepth 1 -type f ! -path "$kept" ! -path "$atlas" 2>/dev/null || true)"
[ -z "$left" ] || fail "kvmon left files in its HOME or working directory: $left"
[ ! -e "$kept" ] || echo "kept as the user's data: ~/.config/kvmon/$(basename "$kept") (the measured host bandwidth)"
[ ! -e "$atlas" ] || echo "kept as the user's data: ~/.local/share/kvmon/$(basename "$atlas") (the measured curves)"

step "done"
echo "kvmon $VERSION: wheel $(( $(stat -c %s "$WHEEL") / 1024 )) KiB, sdist $(( $(stat -c %s "$SDIST") / 1024 )) KiB;" \
  "build ${build_s}s, pipx install ${install_s}s, total $((SECONDS - t0))s; installed with pipx outside the checkout," \
  "self-tested, once, screenshot and desktop entry checked, uninstalled"
