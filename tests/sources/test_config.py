"""Settings read from several places merged into one: the later wins, each value keeps where it came from."""

from __future__ import annotations

from helpers_http import LLAMA_FIXTURES

from kvmon.core.readings import ServerConfig
from kvmon.sources.config import merge_configs
from kvmon.sources.llamacpp.args import parse_llama_server_args
from kvmon.sources.llamacpp.log import parse_llama_log


def _blocks() -> list[str]:
    return (LLAMA_FIXTURES / "kv-log-lines.txt").read_text().split("\n## ")[1:]


def test_merge_configs_later_wins_with_provenance() -> None:
    a = parse_llama_server_args(["llama-server", "-m", "x", "-ctk", "q8_0"]).config
    log = parse_llama_log(_blocks()[0].splitlines())
    user = ServerConfig(n_gpu_layers=12, provenance={"n_gpu_layers": "user"})  # type: ignore[dict-item]
    m = merge_configs(a, log, user)
    assert m.type_k == "f16" and m.provenance["type_k"] == "log"
    assert m.n_gpu_layers == 12 and m.provenance["n_gpu_layers"] == "user"
    assert m.model_path == "x" and m.provenance["model_path"] == "command_line"


def test_a_layer_that_names_no_devices_keeps_the_ones_another_named() -> None:
    """Ollama's log names the GPU; its child's argv names none: the merge keeps the log's (it lost them, and with
    them the GPU's bandwidth and the ceiling)."""
    from kvmon.core.readings import LogDevice

    log = ServerConfig(devices=(LogDevice("CUDA0", "NVIDIA GeForce RTX 4060 Ti"),), provenance={"devices": "log"})  # type: ignore[dict-item]
    argv = parse_llama_server_args(["llama-server", "-m", "x", "-c", "8192"]).config
    m = merge_configs(log, argv)
    assert [d.description for d in m.devices] == ["NVIDIA GeForce RTX 4060 Ti"] and m.provenance["devices"] == "log"
    assert m.n_ctx_total == 8192
