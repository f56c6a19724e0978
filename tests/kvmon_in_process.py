"""kvmon's command line run in this process against a real llama.cpp server: its exit status and what it printed."""

from __future__ import annotations

import contextlib
import io

from real_llama_server import KVMON_TIMEOUT_S

from kvmon.cli import main as kvmon_main

FLAGS = ["-c", "2048", "-np", "1", "--metrics", "--props"]


def _run_kvmon(*argv: str) -> tuple[int, str, str]:
    """``kvmon ARGV`` in this process: (exit status, stdout, stderr)."""
    if argv[:1] == ("once",) and "--timeout" not in argv:
        argv = (*argv, "--timeout", f"{KVMON_TIMEOUT_S:g}")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = kvmon_main(list(argv))
    return rc, out.getvalue(), err.getvalue()
