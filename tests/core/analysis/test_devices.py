"""The analysis on every kind of device: GPUs only the log names, AMD and Intel readings, Apple's unified memory,
host RAM, Ollama with no telemetry; the ceiling per device with that device's bandwidth, and the alerts that follow
from the server's own facts."""

from __future__ import annotations

from dataclasses import replace

import pytest
from analysis_readings import GIB, KV_PER_TOKEN_8B, L8B, FixedRates, reading
from repo_paths import FIXTURES

from kvmon.core.analysis import Analyzer, AnalyzerSettings
from kvmon.core.readings import GpuReading, GpuSetReading, HostReading, ServerConfig
from kvmon.core.snapshot import AlertLevel
from kvmon.sources.llamacpp.log import parse_llama_log

LOGS = FIXTURES / "llama-server-logs"
MIB = 1024 * 1024
NO_DEVICE = GpuSetReading(t_monotonic=0.0, unavailable_reason="no NVIDIA GPU: the NVML library was not found")


def log_config(name: str, **kw: object) -> ServerConfig:
    """What the server's log says, as the llama-server source layers it (the fixture's own lines)."""
    cfg = parse_llama_log((LOGS / name).read_text(encoding="utf-8", errors="replace").splitlines())
    return replace(cfg, n_ctx_total=kw.pop("n_ctx_total", 32768), n_parallel=1, **kw)  # type: ignore[arg-type]


def host(bw: float | None = 60e9, **kw: object) -> HostReading:
    return HostReading(t_monotonic=0.0, ram_total_bytes=64 * GIB, ram_available_bytes=30 * GIB,
                       host_bandwidth_bytes_per_s=bw, host_bandwidth_source="measured" if bw else None,
                       **kw)  # type: ignore[arg-type]


def codes(s) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return {a.code: a for a in s.alerts}


def test_two_gpus_named_only_in_the_log_get_their_table_bandwidth() -> None:
    # cuda-01 (llama.cpp PR #8035): RTX 4060 Ti + RTX 3060, 78/81 layers offloaded, a 23 GB CPU buffer
    cfg = log_config("cuda-01-old-format-2gpu-partial-offload.txt")
    s = Analyzer(rate_tracker=FixedRates(decode=2.0)).update(reading(ctx=4096, config=cfg), NO_DEVICE, host(60e9))
    g0, g1 = s.gpus
    assert (g0.name, g0.log_name, g0.source, g0.bandwidth_source) == ("NVIDIA GeForce RTX 4060 Ti", "CUDA0", "log",
                                                                      "table")
    assert (g0.peak_bandwidth_bytes_per_s, g1.peak_bandwidth_bytes_per_s) == (288e9, 360e9)
    assert g0.vram_used_bytes is None and "log names this device" in g0.reasons["vram_used_bytes"]
    buffers = {"CPU": 22994.45 * MIB, "CUDA0": 12633.25 * MIB, "CUDA1": 8652.0 * MIB}
    scale = L8B.weight_bytes / sum(buffers.values())  # weights read per token over the resident buffers
    kv = KV_PER_TOKEN_8B * 4096
    kv_fracs = {"CUDA_Host": 64 / 2560, "CUDA0": 1472 / 2560, "CUDA1": 1024 / 2560}
    step = (buffers["CUDA0"] * scale + kv * kv_fracs["CUDA0"]) / 288e9 + \
        (buffers["CUDA1"] * scale + kv * kv_fracs["CUDA1"]) / 360e9 + \
        (buffers["CPU"] * scale + kv * kv_fracs["CUDA_Host"]) / 60e9
    assert s.ceiling_tok_s == pytest.approx(1 / step)
    assert s.efficiency == pytest.approx(2.0 * step)
    assert s.extra["placement"] == "log"
    # partial offload and the CPU layers' KV: raised from the log alone, with no device telemetry at all
    alerts = codes(s)
    assert alerts["weights_in_host"].level is AlertLevel.WARNING and "on the CPU" in alerts["weights_in_host"].message
    assert "kv_in_host" in alerts


def test_a_log_with_no_device_list_still_places_the_model() -> None:
    # cuda-11 (llama.cpp #13729): 30/49 layers, buffers CUDA0 and CPU_Mapped only; no name for the GPU
    cfg = log_config("cuda-11-2025-05-b5466-partial-offload-30of49.txt")
    s = Analyzer(rate_tracker=FixedRates()).update(reading(config=cfg), NO_DEVICE, host())
    (g,) = s.gpus
    assert g.log_name == "CUDA0" and g.peak_bandwidth_bytes_per_s is None
    assert s.ceiling_tok_s is None and "--bandwidth CUDA0=GB/s" in s.reasons["ceiling_tok_s"]
    assert "weights_in_host" in codes(s)  # the offload is known though the GPU is not
    # the user names the bandwidth by the server's device name: the ceiling follows
    st = AnalyzerSettings(device_bandwidth_bytes_per_s={"CUDA0": 936e9})
    s = Analyzer(st, rate_tracker=FixedRates()).update(reading(config=cfg), NO_DEVICE, host())
    assert s.gpus[0].bandwidth_source == "user" and s.ceiling_tok_s is not None


def test_an_amd_reading_the_table_cannot_tell_gets_the_name_the_log_gives() -> None:
    # sysfs gave 1002:744c with no memory size (the 7900 XT, XTX or GRE); the log says "AMD Radeon RX 7900 XTX"
    amd = GpuReading(index=0, name="AMD GPU 1002:744c", vendor="amd", source="amdgpu", vendor_index=0,
                     pci_device_id="1002:744c", pci_bus_id="0000:03:00.0",
                     reasons={"peak_bandwidth_bytes_per_s": "PCI id 1002:744c is the … (memory size not readable)"})
    cfg = log_config("rocm-06-2025-01-7900xtx-build4407-header.txt",
                     model_buffer_bytes_by_device={"ROCm0": L8B.weight_bytes - 300 * MIB, "CPU_Mapped": 300 * MIB},
                     offloaded_layers=33, total_layers=33)
    s = Analyzer(rate_tracker=FixedRates()).update(reading(ctx=0, config=cfg), GpuSetReading(0.0, (amd,)))
    (g,) = s.gpus  # one device: the reading, matched to ROCm0 (no second, log-only copy)
    assert (g.log_name, g.source, g.vendor) == ("ROCm0", "amdgpu", "amd")
    assert g.peak_bandwidth_bytes_per_s == 960e9 and g.bandwidth_source == "table"
    assert "as the log names it" in g.reasons["peak_bandwidth_bytes_per_s"]
    assert s.ceiling_tok_s == pytest.approx(960e9 / (L8B.weight_bytes - 300 * MIB))


def test_log_devices_are_matched_by_pci_bus_id_before_order() -> None:
    # NVML numbers by PCI bus, CUDA by speed: the log's bus ids say which is which
    a = GpuReading(index=0, name="NVIDIA GeForce RTX 3060", vendor="nvidia", vendor_index=0, pci_bus_id="0000:01:00.0",
                   peak_bandwidth_bytes_per_s=360e9, bandwidth_source="nvml")
    b = GpuReading(index=1, name="NVIDIA GeForce RTX 4090", vendor="nvidia", vendor_index=1, pci_bus_id="0000:02:00.0",
                   peak_bandwidth_bytes_per_s=1008e9, bandwidth_source="nvml")
    lines = ["llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 4090) (0000:02:00.0) - 23000 "
             "MiB free", "llama_model_load_from_file_impl: using device CUDA1 (NVIDIA GeForce RTX 3060) (0000:01:00.0) "
             "- 11000 MiB free", f"load_tensors:        CUDA0 model buffer size = {L8B.weight_bytes / MIB:.2f} MiB"]
    cfg = replace(parse_llama_log(lines), n_ctx_total=32768, n_parallel=1)
    s = Analyzer(rate_tracker=FixedRates()).update(reading(ctx=0, config=cfg), GpuSetReading(0.0, (a, b)))
    assert [g.log_name for g in s.gpus] == ["CUDA1", "CUDA0"]
    assert s.gpus[1].weights_bytes == pytest.approx(L8B.weight_bytes, abs=MIB) and s.gpus[0].weights_bytes is None
    assert s.ceiling_tok_s == pytest.approx(1008e9 / L8B.weight_bytes)


def _apple(limit: int | None, source: str | None = "metal", total: int = 32 * GIB) -> GpuReading:
    return GpuReading(index=0, name="Apple M1 Max", kind="unified_memory", vendor="apple", source="apple",
                      vendor_index=0, vram_total_bytes=total, vram_used_bytes=12 * GIB,
                      vram_free_bytes=total - 12 * GIB,
                      peak_bandwidth_bytes_per_s=400e9, bandwidth_source="table", working_set_limit_bytes=limit,
                      working_set_source=source)


def test_unified_memory_holds_weights_and_kv_and_warns_before_the_working_set_limit() -> None:
    # metal-01 (llama.cpp #22800): MTL0 (Apple M1 Max), recommendedMaxWorkingSetSize = 22906.50 MB
    on_gpu = L8B.weight_bytes - 300 * MIB  # the token embeddings stay in a CPU buffer
    cfg = log_config("metal-01-2026-05-m1max-device-init-build9049.txt",
                     model_buffer_bytes_by_device={"MTL0_Mapped": on_gpu, "CPU_Mapped": 300 * MIB},
                     kv_buffer_bytes_by_device={"MTL0": 4 * GIB}, offloaded_layers=33, total_layers=33)
    s = Analyzer(rate_tracker=FixedRates()).update(reading(config=cfg), GpuSetReading(0.0, (_apple(None, None),)),
                                                   host(400e9))
    (g,) = s.gpus
    assert g.kind == "unified_memory" and g.log_name == "MTL0"
    assert (g.working_set_limit_bytes, g.working_set_source) == (22_906_500_000, "log")  # the log's real value
    assert g.weights_bytes == on_gpu and g.kv_allocated_bytes == 4 * GIB
    assert s.ceiling_tok_s == pytest.approx(400e9 / (on_gpu + KV_PER_TOKEN_8B * 8192))
    assert s.host.unified_with == 0
    assert "unified_working_set" not in codes(s)  # 4.9 GB + 4 GiB is well inside 21.3 GiB
    # a 144K context: weights and cache pass the limit
    big = replace(cfg, kv_buffer_bytes_by_device={"MTL0": 18 * GIB}, n_ctx_total=147456)
    s = Analyzer(rate_tracker=FixedRates()).update(reading(config=big, n_ctx=147456),
                                                   GpuSetReading(0.0, (_apple(None, None),)), host(400e9))
    alert = codes(s)["unified_working_set"]
    assert alert.level is AlertLevel.CRITICAL and "working-set limit on Apple M1 Max" in alert.message
    assert "-ctk q8_0" in alert.message
    # close to it (90 % or more) is a warning first
    near = replace(cfg, n_ctx_total=131072)  # 16 GiB of KV: 20.3 GiB of 21
    s = Analyzer(rate_tracker=FixedRates()).update(reading(config=near, n_ctx=131072),
                                                   GpuSetReading(0.0, (_apple(21 * GIB),)))
    assert codes(s)["unified_working_set"].level is AlertLevel.WARNING


def test_an_estimated_working_set_says_so_in_the_alert() -> None:
    cfg = ServerConfig(n_ctx_total=131072, n_parallel=1, model_buffer_bytes_by_device={"MTL0": L8B.weight_bytes},
                       kv_buffer_bytes_by_device={"MTL0": 16 * GIB})
    s = Analyzer(rate_tracker=FixedRates()).update(reading(config=cfg, n_ctx=131072),
                                                   GpuSetReading(0.0, (_apple(int(32 * GIB * 2 / 3), "estimated"),)))
    assert "estimated" in codes(s)["unified_working_set"].message


def test_an_apu_reads_the_hosts_bandwidth() -> None:
    apu = GpuReading(index=0, name="AMD Radeon 780M", kind="unified_memory", vendor="amd", source="amdgpu",
                     vendor_index=0, vram_total_bytes=33 * GIB, vram_used_bytes=2 * GIB, vram_free_bytes=31 * GIB,
                     server_used_bytes=6 * GIB)
    s = Analyzer(rate_tracker=FixedRates()).update(reading(ctx=0), GpuSetReading(0.0, (apu,)), host(89.6e9))
    (g,) = s.gpus
    assert g.peak_bandwidth_bytes_per_s == 89.6e9 and g.bandwidth_source == "host"
    assert s.ceiling_tok_s == pytest.approx(89.6e9 / L8B.weight_bytes)


def test_cpu_only_although_a_gpu_is_there_is_a_warning() -> None:
    # rocm-02 (ROCm #5104): weights only in CPU_Mapped, KV on the CPU, yet a ROCm0 compute buffer: the GPU idles
    cfg = log_config("rocm-02-2025-kv_cache_unified-zero-offload.txt")
    s = Analyzer(rate_tracker=FixedRates(decode=3.0)).update(reading(config=cfg), NO_DEVICE, host(60e9))
    alert = codes(s)["cpu_only"]
    assert alert.level is AlertLevel.WARNING and "ROCm0" in alert.message and "-ngl" in alert.message
    assert s.ceiling_tok_s is not None and s.host.in_ceiling
    assert not any(c in codes(s) for c in ("kv_in_host", "weights_in_host"))


def test_ollama_partial_offload_without_any_gpu_reading_raises_the_offload_alert() -> None:
    r = reading(backend="ollama", weight_bytes_vram=3 * 10**9, weight_bytes_host=2 * 10**9)
    s = Analyzer(rate_tracker=FixedRates(decode=9.0)).update(r, NO_DEVICE, host(60e9))
    alert = codes(s)["weights_in_host"]
    assert alert.level is AlertLevel.WARNING and "(40%)" in alert.message and "num_ctx" in alert.message
    (g,) = s.gpus
    assert g.name == "GPU (not read)" and g.weights_bytes == pytest.approx(0.6 * L8B.weight_bytes, abs=1)
    assert s.ceiling_tok_s is None and "--bandwidth 0=GB/s" in s.reasons["ceiling_tok_s"]
    st = AnalyzerSettings(gpu_bandwidth_bytes_per_s={0: 288e9})
    s = Analyzer(st, rate_tracker=FixedRates(decode=9.0)).update(r, NO_DEVICE, host(60e9))
    assert s.ceiling_tok_s is not None and "weights_in_host" in codes(s)


def test_rpc_devices_need_a_bandwidth_the_user_gives_by_name() -> None:
    cfg = log_config("vulkan-02-2025-08-vulkan-plus-rpc-multi-device.txt")
    s = Analyzer(rate_tracker=FixedRates()).update(reading(ctx=0, config=cfg), NO_DEVICE, host())
    assert s.ceiling_tok_s is None and "--bandwidth Vulkan0=GB/s" in s.reasons["ceiling_tok_s"]
    rpc = [g for g in s.gpus if (g.log_name or "").startswith("RPC[")]
    assert len(rpc) == 3 and all("remote machine" in g.reasons["peak_bandwidth_bytes_per_s"] for g in rpc)
    names = {g.log_name for g in s.gpus}
    st = AnalyzerSettings(device_bandwidth_bytes_per_s={n: 256e9 for n in names if n and n.startswith("RPC[")}
                          | {"Vulkan0": 256e9})
    s = Analyzer(st, rate_tracker=FixedRates()).update(reading(ctx=0, config=cfg), NO_DEVICE, host())
    assert s.ceiling_tok_s is not None  # four devices in a row, each at its bandwidth


def test_swap_growing_while_the_model_lives_in_ram_warns() -> None:
    none = GpuSetReading(t_monotonic=0.0, unavailable_reason="no device")
    a = Analyzer(rate_tracker=FixedRates(decode=3.0))
    for i, swap in enumerate((1 * GIB, 1.2 * GIB, 1.4 * GIB, 1.6 * GIB)):
        s = a.update(reading(t=i * 2.0), none, host(60e9, swap_total_bytes=8 * GIB, swap_used_bytes=int(swap)))
    alert = codes(s)["swap_growing"]
    assert alert.level is AlertLevel.WARNING and "614 MiB" in alert.message


def test_a_log_that_hides_placement_says_how_to_show_it() -> None:
    hint = "llama-server logs at verbosity 3: … start it with -lv 4"
    s = Analyzer(rate_tracker=FixedRates()).update(reading(reasons={"log_placement": hint}),
                                                   GpuSetReading(0.0, (GpuReading(index=0, name="RTX 4090"),)))
    assert codes(s)["log_verbosity"].level is AlertLevel.INFO and "-lv 4" in codes(s)["log_verbosity"].message
