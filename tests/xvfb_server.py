"""A real X server (Xvfb) on a display number of its own, for the tests that need real windows."""

from __future__ import annotations

import os
import subprocess


def _start_xvfb() -> tuple[subprocess.Popen[bytes], str]:
    """Xvfb on a free display number it picks itself (-displayfd), so parallel runs never collide."""
    r, w = os.pipe()
    proc = subprocess.Popen(["Xvfb", "-displayfd", str(w), "-screen", "0", "1280x800x24", "-nolisten", "tcp"],
                            pass_fds=(w,), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.close(w)
    with os.fdopen(r) as f:
        number = f.readline().strip()
    if not number:
        proc.kill()
        _out, err = proc.communicate(timeout=5)
        raise RuntimeError(f"Xvfb did not start: {err.decode(errors='replace')[-500:]}")
    return proc, f":{number}"
