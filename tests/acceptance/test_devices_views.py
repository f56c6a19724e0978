"""Every device kind as the dashboard, once --json, the exporter and the what-if calculator show it: unified memory's
working-set line, a device only the log names, host RAM as a device; Settings and --bandwidth set bandwidths."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from kvmon.cli import main as kvmon_main
from kvmon.core.analysis import AnalyzerSettings
from kvmon.core.analysis.settings import BandwidthSpecError, parse_bandwidth, split_specs, with_bandwidths
from kvmon.core.report_json import snapshot_to_json
from kvmon.core.report_prometheus import snapshot_families
from kvmon.core.snapshot import Connection, ConnectionStatus, GpuView, HostView, Snapshot
from kvmon.core.whatif import compute_whatif, live_gpu, presets, table_gpus
from kvmon.gui.panels.bandwidth import host_bandwidth_bar
from kvmon.gui.panels.memory import gpu_bar, host_bar
from kvmon.gui.settings import Settings, SettingsDialog

GIB = 1024**3


def _snap(gpus: tuple[GpuView, ...] = (), host: HostView | None = None) -> Snapshot:
    return Snapshot(seq=1, t_monotonic=0.0, t_wall=1.8e9, connection=Connection(ConnectionStatus.CONNECTED),
                    backend="llama-server", gpus=gpus, host=host or HostView())


M2MAX = GpuView(index=0, name="Apple M2 Max", vram_total_bytes=64 * GIB, vram_used_bytes=53 * GIB,
                vram_free_bytes=11 * GIB, weights_bytes=39 * GIB, kv_allocated_bytes=7 * GIB,
                peak_bandwidth_bytes_per_s=400e9, bandwidth_source="table", kind="unified_memory", vendor="apple",
                source="apple", log_name="MTL0", working_set_limit_bytes=48 * GIB, working_set_source="metal")
CPU_HOST = HostView(ram_total_bytes=64 * GIB, ram_available_bytes=40 * GIB, weights_in_host_bytes=5 * GIB,
                    kv_in_host_bytes=4 * GIB, host_bandwidth_bytes_per_s=62e9, host_bandwidth_source="measured",
                    host_bandwidth_measured_at_unix_s=1.8e9, memory_type="DDR5-6000", cpu_name="Ryzen",
                    achieved_bandwidth_bytes_per_s=50e9, in_ceiling=True)


def test_unified_memory_bar_draws_its_cliff_at_the_working_set_limit() -> None:
    bar = gpu_bar(M2MAX, _snap((M2MAX,)))
    assert bar is not None and bar.label == "Unified" and bar.limit_at == 48 * GIB and bar.total == 64 * GIB
    assert "GPU limit 48.0 GiB" in bar.note and "working-set limit" in bar.tip and "Metal" in bar.tip
    est = gpu_bar(M2MAX.__class__(**{**M2MAX.__dict__, "working_set_source": "estimated"}), _snap())
    assert est is not None and "GPU limit ≈ 48.0 GiB" in est.note and "estimated" in est.tip


def test_a_device_only_the_log_names_shows_what_the_log_said() -> None:
    log_only = GpuView(index=0, name="NVIDIA GeForce RTX 3090", vram_total_bytes=24 * GIB, vram_free_bytes=23 * GIB,
                       weights_bytes=8 * GIB, kv_allocated_bytes=2 * GIB, source="log", log_name="CUDA0",
                       memory_source="log", peak_bandwidth_bytes_per_s=936e9, bandwidth_source="table")
    bar = gpu_bar(log_only, _snap((log_only,)))
    assert bar is not None and "from the log" in bar.note and "no live reading" in bar.tip
    unknown_size = GpuView(index=1, name="RPC[10.0.0.2:50052]", weights_bytes=30 * GIB, source="log",
                           reasons={"vram_total_bytes": "the server's log does not give this device's memory size"})
    bar = gpu_bar(unknown_size, _snap((unknown_size,)))
    assert bar is not None and bar.total == 30 * GIB and not bar.limit_line and "size unknown" in bar.note


def test_host_ram_is_a_device_with_its_bandwidth_and_the_spill_line() -> None:
    s = _snap(host=CPU_HOST)
    bar = host_bar(s)
    assert bar is not None and bar.limit_line and "weights + KV 9.00 GiB" in bar.note and "of 64.0 GiB" in bar.note
    assert "62.0 GB/s (measured" in bar.tip and "DDR5-6000" in bar.tip
    bw = host_bandwidth_bar(s)
    assert bw is not None and bw.total == 62e9 and bw.segments[0].value == 50e9 and "(81%)" in bw.note
    unknown = host_bandwidth_bar(_snap(host=HostView(ram_total_bytes=64 * GIB, in_ceiling=True)))
    assert unknown is not None and "--bandwidth host" in unknown.note + unknown.tip
    # an Apple Mac's host RAM is the unified bar: no second bar for the same memory
    assert host_bar(_snap((M2MAX,), HostView(ram_total_bytes=64 * GIB, weights_in_host_bytes=GIB,
                                            unified_with=0))) is None


def test_once_json_and_the_exporter_carry_the_device_kinds() -> None:
    s = _snap((M2MAX,), HostView(ram_total_bytes=64 * GIB, ram_available_bytes=11 * GIB, unified_with=0,
                                 host_bandwidth_bytes_per_s=400e9, host_bandwidth_source="table"))
    doc = snapshot_to_json(s)
    g = doc["gpus"][0]
    assert (g["kind"], g["vendor"], g["source"], g["log_name"]) == ("unified_memory", "apple", "apple", "MTL0")
    assert g["working_set_limit_bytes"] == 48 * GIB and g["working_set_source"] == "metal"
    assert [d["id"] for d in doc["devices"]] == ["gpu0", "host"]
    assert doc["devices"][1]["unified_with"] == "gpu0" and doc["devices"][0]["in_ceiling"] is True
    assert doc["host"]["kind"] == "host_ram" and doc["host"]["host_bandwidth_source"] == "table"
    fams = {f.name: f for f in snapshot_families(s)}
    info = fams["kvmon_device_info"].samples[0].labels
    assert info["kind"] == "unified_memory" and info["log_name"] == "MTL0" and info["vendor"] == "apple"
    assert fams["kvmon_gpu_working_set_limit_bytes"].samples[0].value == 48 * GIB
    assert fams["kvmon_host_bandwidth_info"].samples[0].labels["source"] == "table"
    assert fams["kvmon_host_in_ceiling"].samples[0].value == 0


def test_what_if_has_cpu_apple_and_amd_presets() -> None:
    choices = table_gpus()
    groups = {c.group for c in choices}
    assert {"NVIDIA", "AMD", "Intel", "Apple", "CPU"} <= groups
    names = [c.name for c in choices]
    assert any("DDR5-6000 × 2 channels" in n for n in names) and any("DDR4-3200" in n for n in names)
    assert "Radeon RX 7900 XTX" in names and "Apple M4 Max (32-core GPU)" in names and "Arc B580" in names
    ddr5 = next(c for c in choices if "DDR5-6000 × 2" in c.name)
    assert ddr5.bandwidth_bytes_per_s == pytest.approx(96e9)
    p = presets()["llama-3.1-8b"]
    r = compute_whatif(ddr5, p.metadata, p.weight_bytes, 8192, "f16")
    assert r.ceiling_at_ctx_tok_s == pytest.approx(96e9 / (p.weight_bytes + 128 * 1024 * 8192), rel=1e-3) and r.fits
    live = live_gpu(_snap(host=CPU_HOST))
    assert live is not None and live.group == "live" and "CPU" in live.name and live.bandwidth_bytes_per_s == 62e9
    unified = live_gpu(_snap((M2MAX,)))
    assert unified is not None and unified.vram_bytes == 48 * GIB  # what the GPU may hold, not all the RAM


@pytest.mark.parametrize(("spec", "parsed"), [("host=60", ("host", 60e9)), ("0=936", ("0", 936e9)),
                                              ("gpu1=1008", ("1", 1008e9)), ("CUDA0=936 GB/s", ("CUDA0", 936e9)),
                                              ("RPC[10.0.2.242:50052]=256", ("RPC[10.0.2.242:50052]", 256e9))])
def test_bandwidth_specs(spec: str, parsed: tuple[str, float]) -> None:
    assert parse_bandwidth(spec) == parsed


@pytest.mark.parametrize(("spec", "words"), [("60", "DEVICE=GB/s"), ("host=fast", "not a number"),
                                             ("host=0", "outside"), ("=60", "DEVICE=GB/s"), ("host=1e9", "outside")])
def test_bad_bandwidth_specs_say_what_to_write(spec: str, words: str) -> None:
    with pytest.raises(BandwidthSpecError, match=words):
        parse_bandwidth(spec)


def test_settings_from_specs_later_ones_win() -> None:
    st = with_bandwidths(AnalyzerSettings(), ["host=60", "0=936", "CUDA1=500", "host=70"])
    assert st.host_bandwidth_bytes_per_s == 70e9 and st.gpu_bandwidth_bytes_per_s == {0: 936e9}
    assert st.device_bandwidth_bytes_per_s == {"CUDA1": 500e9}
    assert split_specs("host=60, CUDA0=936;1=1008  2=3") == ["host=60", "CUDA0=936", "1=1008", "2=3"]


def test_bad_bandwidth_on_the_command_line_is_a_usage_error() -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as e:
        kvmon_main(["once", "http://127.0.0.1:9", "--bandwidth", "host=lots"])
    assert e.value.code == 2 and "not a number of GB/s" in err.getvalue()


def test_settings_dialog_keeps_bandwidths_and_refuses_a_bad_one(qtbot, tmp_path: Path) -> None:
    settings = Settings(str(tmp_path / "s.ini"))
    dlg = SettingsDialog(settings, snapshot=_snap(host=CPU_HOST))
    qtbot.addWidget(dlg)
    assert "measured: 62 GB/s on" in dlg.host_bw.placeholderText()
    dlg.host_bw.setText("55")
    dlg.device_bw.setText("CUDA0=936, 1=lots")
    dlg.accept()
    assert dlg.result() == 0 and "not a number" in dlg.bw_error.text() and dlg.bw_error.isVisibleTo(dlg)
    dlg.device_bw.setText("CUDA0=936, 1=1008")
    dlg.accept()
    dlg.apply()
    again = Settings(str(tmp_path / "s.ini"))
    assert again.bandwidth_specs == ["host=55", "CUDA0=936", "1=1008"]
    from kvmon.gui.controller import session_settings

    st = session_settings(again, ["host=40"])
    assert st.host_bandwidth_bytes_per_s == 40e9 and st.device_bandwidth_bytes_per_s == {"CUDA0": 936e9}


def test_once_json_with_bandwidth_on_the_simulator(tmp_path: Path) -> None:
    from kvmon.sim.server import SimServer

    with SimServer("seed-3090x2", start_at_s=60.0) as sim:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = kvmon_main(["once", sim.url, "--log", sim.log_path, "--json", "--interval", "0.3",
                             "--bandwidth", "CUDA0=500", "--bandwidth", "1=500"])
    assert rc == 0
    doc = json.loads(out.getvalue())
    assert all(d["bandwidth_source"] == "user" and d["peak_bandwidth_bytes_per_s"] == 500e9 for d in doc["gpus"])


@pytest.mark.parametrize(("seconds", "says"), [(100.0, "full in ≈ 2 min"), (45.0, "full in 45 s")])
def test_a_gpu_filling_says_when_once_approximate(seconds: float, says: str) -> None:
    """The bar's note and the alert read alike: "full in ≈ 2 min" (never "~≈"), and an exact time under a minute."""
    from dataclasses import replace

    from kvmon.core.snapshot import Forecast

    g = GpuView(index=0, name="NVIDIA GeForce RTX 4090", vram_total_bytes=24 * GIB, vram_used_bytes=16 * GIB,
                vram_free_bytes=8 * GIB)
    bar = gpu_bar(g, replace(_snap((g,)), forecast=Forecast(seconds_until_vram_full=seconds)))
    assert bar is not None and bar.note.endswith(f"· {says}") and "~" not in bar.note
