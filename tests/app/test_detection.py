"""Which server answers at a URL, asked once: the backend to open there, or nothing when nothing usable answers."""

from __future__ import annotations

import socket

from kvmon.app.detection import detect, server_labels
from kvmon.sim.server import SimServer


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_simulated_vllm_is_told_apart() -> None:
    with SimServer("vllm") as sim:
        assert detect(sim.url, None, 5.0) == "vllm"


def test_nothing_listening_is_nothing_to_open() -> None:
    assert detect(f"http://127.0.0.1:{_closed_port()}", None, 2.0) is None


def test_the_servers_kvmon_reads_are_named_as_people_name_them() -> None:
    assert server_labels() == ("llama-server", "llama-server router", "llama-swap", "Ollama", "vLLM", "LM Studio")
