"""The configuration a poll measured on, the key every measured point is filed under: the devices holding the
weights with their shares, the same from poll to poll, and none while no model is named."""

from __future__ import annotations

from kvmon.app.demo import demo_session, step_demo
from kvmon.core.curve_identity import config_of, snapshot_config
from kvmon.core.snapshot import HostView, ModelView


def test_a_spilled_model_is_filed_under_its_gpu_and_host_ram_with_their_shares() -> None:
    session = demo_session("spill-4090", None, start_at_s=100, stepped=True)
    try:
        snaps = [s for s in step_demo(session, 10.0, 2.0) if s.server_read]
    finally:
        session.close()
    configs = {snapshot_config(s) for s in snaps}
    assert len(configs) == 1  # one configuration: every poll's point goes under the same curve
    config = configs.pop()
    assert config is not None
    assert config.devices == ("NVIDIA GeForce RTX 4090", "host")
    assert config.weight_shares == (0.95, 0.05)
    assert (config.backend, config.n_ctx, config.kv_type_k) == ("llama-server", 32768, "f16")


def test_no_model_named_is_nothing_to_file_a_point_under() -> None:
    assert config_of("llama-server", "b11549", ModelView(), (), HostView()) is None
