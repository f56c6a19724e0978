"""The simulated llama.cpp router lists its models as the real router does: each with the llama-server command line
the router would start it with, the same flags as a captured router's, nothing loaded until asked."""

from __future__ import annotations

import json

import httpx
from repo_paths import FIXTURES

from kvmon.sim.multi import MultiSim
from kvmon.sources.router.source import parse_models


def _flags(args: tuple[str, ...]) -> set[str]:
    return {a for a in args if a.startswith("--")}


def test_the_model_list_carries_the_command_lines_a_real_router_gives(router: MultiSim) -> None:
    (real,), _notes = parse_models(json.loads((FIXTURES / "llama-router" / "models.loaded.json").read_text()))
    models, notes = parse_models(httpx.get(f"{router.url}/models?autoload=false", timeout=10).json())
    assert notes == []
    assert {m.name for m in models} >= {"qwen3-8b", "gemma-3-12b", "gpt-oss-20b"}
    for m in models:
        assert m.status == "unloaded"
        assert _flags(real.args) - {"--parallel"} <= _flags(m.args)
        assert m.args[m.args.index("--alias") + 1] == m.name
