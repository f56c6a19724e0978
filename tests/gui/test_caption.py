"""The caption strip's devices and server, as people name them: "2× RTX 3090", "RTX 4090 + GPU 1", the CPU with its
memory when it decodes alone, and a router's or llama-swap's own name over its backend's."""

from __future__ import annotations

from kvmon.core.serving import ServingView
from kvmon.core.snapshot import Connection, ConnectionStatus, GpuView, HostView, Snapshot
from kvmon.gui.caption import gpu_text, server_label
from kvmon.sources.backends import by_name


def _snap(**kw: object) -> Snapshot:
    return Snapshot(1, 0.0, 1.8e9, connection=Connection(ConnectionStatus.CONNECTED), **kw)  # type: ignore[arg-type]


def test_the_devices_in_a_few_words() -> None:
    twins = (GpuView(index=0, name="RTX 3090"), GpuView(index=1, name="RTX 3090"))
    assert gpu_text(_snap(gpus=twins)) == "2× RTX 3090"
    assert gpu_text(_snap(gpus=(GpuView(index=0, name="RTX 4090"), GpuView(index=1)))) == "RTX 4090 + GPU 1"
    assert gpu_text(_snap(host=HostView(in_ceiling=True, memory_type="DDR5-6000"))) == "CPU (DDR5-6000)"
    assert gpu_text(_snap()) == "no GPU data"


def test_the_server_by_the_name_people_use() -> None:
    assert server_label(_snap(backend=by_name("ollama"))) == "Ollama"
    assert server_label(_snap(backend=by_name("llama-swap"), serving=ServingView(kind="llama-swap"))) == "llama-swap"
    assert server_label(_snap(backend=by_name("llama-router"), serving=ServingView(kind="router"))) == \
        "llama-server router"
    assert server_label(_snap()) == ""
