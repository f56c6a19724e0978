"""``kvmon once --demo SCENARIO [--start-at S] [--after N]``: the built-in simulator read at a point of its story, as
the dashboard shows it there; bad input refused with a clear reason."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from kvmon.cli.once import run

ROOT = Path(__file__).resolve().parents[1]


def _run(**kw: Any) -> tuple[int, str, str]:
    base: dict[str, Any] = {"url": None, "api_key": None, "log": None, "timeout": 3.0, "json": True, "interval": 1.0,
                            "demo": None, "start_at": 0.0, "after": None}
    base.update(kw)
    out, err = io.StringIO(), io.StringIO()
    rc = run(argparse.Namespace(**base), out, err)
    return rc, out.getvalue(), err.getvalue()


def test_the_spill_after_the_reload_as_a_user_would_run_it() -> None:
    """A real command line in its own process: 350 s into spill-4090 and 20 s watched, the model has spilled."""
    cmd = [sys.executable, "-m", "kvmon", "once", "--demo", "spill-4090", "--start-at", "350", "--after", "20",
           "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["backend"] == "llama-server" and doc["model"]["n_ctx"] == 131072
    assert {"kv_in_host", "weights_in_host"} <= {a["code"] for a in doc["alerts"]}
    assert doc["host"]["in_ceiling"] and doc["host"]["kv_in_host_bytes"] > 9 * 1024**3
    assert doc["ceiling_tok_s"] is not None and doc["ceiling_tok_s"] < 20


def test_text_for_a_router_names_its_models() -> None:
    rc, out, err = _run(demo="router", start_at=20.0, after=3.0, json=False)
    assert rc == 0, err
    assert "llama-server router" in out and "qwen3-8b loaded" in out and "gemma-3-12b unloaded" in out
    assert out.splitlines()[0].startswith("Idle at ") and out.splitlines()[1].startswith("llama-server")


def test_a_loading_model_is_the_document_of_that_moment() -> None:
    """Unlike a server read by URL (exit 2 while it loads), the story's loading moment is printed: the window shows
    it too."""
    rc, out, err = _run(demo="spill-4090", start_at=331.0, after=0.0)
    assert rc == 0, err
    assert json.loads(out)["connection"]["status"] == "loading"


def test_the_same_point_gives_the_same_document() -> None:
    """Simulated time moves only between polls: two runs of one point agree to the byte on what they read."""
    docs = [json.loads(_run(demo="cpu-ddr5", start_at=100.0, after=12.0)[1]) for _ in range(2)]
    for key in ("context_tokens", "decode_tok_s", "ceiling_tok_s", "efficiency", "alerts", "gpus"):
        assert docs[0][key] == docs[1][key], key
    for key in ("milestones", "fit"):  # the wall-clock times of the two runs differ, the story does not
        assert docs[0]["forecast"][key] == docs[1]["forecast"][key], key


def test_bad_input_exits_2_with_one_line_and_prints_nothing() -> None:
    for kw, words in ((dict(demo="nope"), "unknown scenario 'nope'; known: seed-3090x2"),
                      (dict(demo="vllm", url="http://127.0.0.1:8080"), "either a URL"),
                      (dict(url="http://127.0.0.1:9", start_at=5.0), "--start-at and --after are for --demo"),
                      (dict(url="http://127.0.0.1:9", after=5.0), "--start-at and --after are for --demo")):
        rc, out, err = _run(**kw)
        assert rc == 2 and out == "", kw
        assert words in err and err.count("\n") == 1, (kw, err)
