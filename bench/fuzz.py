"""The property tests of every reader of outside input (``pytest -m fuzz``) at 10,000 examples each, not CI's few
hundred: parse_json, /slots, /metrics, Ollama's answers, the proxy's stats document, log lines, GGUF headers,
recording lines and proxied request heads. Prints each test's time; exits non-zero when one finds a failure.

Usage: python bench/fuzz.py [--examples 10000] [-k EXPR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=10_000)
    ap.add_argument("-k", default=None, help="only the tests matching this pytest expression")
    args = ap.parse_args()
    env = {**os.environ, "KVMON_FUZZ_EXAMPLES": str(args.examples), "QT_QPA_PLATFORM": "offscreen"}
    cmd = [sys.executable, "-m", "pytest", "-m", "fuzz", "-q", "-p", "no:cacheprovider", "--timeout", "7200",
           "--durations=0", "tests"]
    if args.k:
        cmd += ["-k", args.k]
    print(f"fuzzing with {args.examples:,} examples per test: {' '.join(cmd[2:])}", flush=True)
    t0 = time.monotonic()
    rc = subprocess.call(cmd, cwd=ROOT, env=env)
    print(f"done in {time.monotonic() - t0:.0f} s, pytest exit {rc}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
