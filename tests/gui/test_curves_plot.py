"""A sweep's picture says what it shows without the window around it: model, cache, device, context, server, the
tokens generated at each depth, when it was swept and by which kvmon."""

from __future__ import annotations

import time

from sweep_curves import F16, _sweep

from kvmon import __version__
from kvmon.core.snapshot import Connection, ConnectionStatus, GpuView, ModelView, Snapshot
from kvmon.gui.curves_plot import sweep_caption


def test_the_caption_names_everything_the_curve_depends_on() -> None:
    result = _sweep(F16, [100, 80, 60], time.mktime((2026, 12, 1, 14, 2, 0, 0, 0, -1)))
    snap = Snapshot(1, 0.0, 1.8e9, connection=Connection(ConnectionStatus.CONNECTED), backend="llama-server",
                    server_version="b11549", gpus=(GpuView(index=0, name="NVIDIA GeForce RTX 4090"),),
                    model=ModelView(name="Llama 3.1 8B", quantization="Q4_K_M", kv_type_k="q8_0", kv_type_v="q8_0",
                                    n_ctx=32768))
    assert sweep_caption(result, snap).split(" · ") == [
        "Llama 3.1 8B (Q4_K_M)", "KV q8_0/q8_0", "NVIDIA GeForce RTX 4090", "n_ctx 32,768", "llama-server b11549",
        "64 tokens generated at each depth", "swept 2026-12-01 14:02", f"kvmon {__version__}"]


def test_what_is_not_known_is_left_out_rather_than_shown_empty() -> None:
    result = _sweep(F16, [100], time.mktime((2026, 12, 1, 14, 2, 0, 0, 0, -1)))
    snap = Snapshot(1, 0.0, 1.8e9, connection=Connection(ConnectionStatus.CONNECTED))
    parts = sweep_caption(result, snap).split(" · ")
    assert parts[0] == "model"
    assert not any(p.startswith(("KV", "n_ctx")) for p in parts)
