"""The placement parser against real llama.cpp logs from CUDA, ROCm, Vulkan, Metal, SYCL and CPU runs (2023–2026).

Every file of tests/fixtures/llama-server-logs is a verbatim excerpt from a public issue or pull request (its header
names it); each row below says what kvmon must read from it: the devices the log names, the model and KV buffers
per device, the offloaded layers, and whether it must say that the placement lines are missing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers_http import LLAMA_FIXTURES
from repo_paths import FIXTURES

from kvmon.core.readings import LogDevice
from kvmon.sources.llamacpp.log import LlamaLogParser, LogFollower, parse_llama_log

LOGS = FIXTURES / "llama-server-logs"
MIB = 1024 * 1024

# file: ({device: description}, {model buffer: MiB}, {KV buffer: MiB}, (offloaded, of), hint expected)
EXPECTED: dict[str, tuple[dict[str, str | None], dict[str, float], dict[str, float], tuple[int, int] | None, bool]] = {
    "cpu-01-2025-09-cpu-only-kv_cache.txt": ({}, {"CPU_Mapped": 14526.27}, {"CPU": 7000.0}, None, False),
    "cpu-02-old-format-cpu-only-2024.txt": ({}, {"CPU": 11712.97}, {"CPU": 64.0}, (0, 33), False),
    "cpu-03-2025-ollama-rocm-init-failed-cpu-fallback.txt": ({}, {"CPU_Mapped": 637.85}, {}, None, False),
    "cuda-01-old-format-2gpu-partial-offload.txt": (
        {"CUDA0": "NVIDIA GeForce RTX 4060 Ti", "CUDA1": "NVIDIA GeForce RTX 3060"},
        {"CPU": 22994.45, "CUDA0": 12633.25, "CUDA1": 8652.0}, {"CUDA_Host": 64.0, "CUDA0": 1472.0, "CUDA1": 1024.0},
        (78, 81), False),
    "cuda-02-old-format-single-full-offload.txt": (
        {"CUDA0": "NVIDIA GeForce RTX 4080"}, {"CPU": 297.0, "CUDA0": 7317.71}, {"CUDA0": 180.0}, (31, 31), False),
    "cuda-03-early2025-load_tensors-llama_init_from_model.txt": (
        {}, {"CUDA0": 8148.38, "CPU_Mapped": 417.66}, {}, (49, 49), False),
    "cuda-04-ollama-2025-08-multi-gpu.txt": (
        {}, {"CUDA0": 24277.75, "CUDA2": 46151.91, "CPU_Mapped": 1064.62}, {}, (81, 81), False),
    "cuda-05-2026-02-fit-memory-breakdown-gtx1080ti.txt": (
        {"CUDA0": "NVIDIA GeForce GTX 1080 Ti"}, {}, {}, None, False),
    "cuda-06-2026-03-pr20184-device-list-variant.txt": (
        {"CUDA0": "NVIDIA GeForce RTX 4070 Laptop GPU"}, {}, {}, None, False),
    "cuda-07-2026-08-ollama-llama-server-memory-breakdown.txt": ({"CUDA0": "RTX 3090"}, {}, {}, None, False),
    "cuda-08-2026-ollama-pr16031-multi-gpu-fit.txt": ({"CUDA0": "RTX 5090", "CUDA1": "RTX 3090"}, {}, {}, None, False),
    "cuda-09-2026-iswa-kv-with-timestamps.txt": ({}, {}, {"CUDA0": 182.75}, None, False),
    "cuda-10-old-format-2gpu-pipeline-parallel.txt": (
        {"CUDA0": "NVIDIA GeForce RTX 4070 Ti", "CUDA1": "NVIDIA GeForce RTX 3090 Ti"},
        {"CPU": 1640.62, "CUDA0": 5434.38, "CUDA1": 13989.53}, {"CUDA0": 1536.0, "CUDA1": 3584.0}, (41, 41), False),
    "cuda-11-2025-05-b5466-partial-offload-30of49.txt": (
        {}, {"CUDA0": 10750.86, "CPU_Mapped": 6940.48}, {}, (30, 49), False),
    "metal-01-2026-05-m1max-device-init-build9049.txt": ({"MTL0": "Apple M1 Max"}, {}, {}, None, False),
    "metal-02-2026-m3pro-partial-offload-metal_mapped.txt": (
        {"MTL0": "Apple M3 Pro"}, {"CPU_Mapped": 1018.6, "CPU_REPACK": 26.89, "Metal_Mapped": 11536.18}, {}, (24, 25),
        False),
    "metal-03-2025-12-iswa-metal-kv.txt": ({}, {}, {"Metal": 18.0}, None, False),
    "metal-04-old-format-m1pro-2024.txt": ({"MTL0": "Apple M1 Pro"}, {"CPU": 66.41, "Metal": 1114.92}, {}, (23, 23),
                                           False),
    "metal-05-2026-04-m5max-recommended-working-set.txt": ({"MTL0": "Apple M5 Max"}, {}, {}, None, False),
    "metal-06-old-format-intel-mac-radeon-vii-partial.txt": (
        {"MTL0": "AMD Radeon VII"}, {"Metal": 16514.7, "CPU": 39460.31}, {}, (33, 81), False),
    "metal-07-2023-m2max-96gb-recommended-73728.txt": ({"MTL0": None}, {}, {}, None, False),
    "metal-08-2026-05-m2pro-device-init.txt": ({"MTL0": "Apple M2 Pro"}, {}, {}, None, False),
    "override-01-2025-02-ot-tensor-overrides.txt": ({}, {}, {}, None, False),
    "rocm-01-old-format-ggml_init_cublas-7900xtx.txt": ({"ROCm0": "Radeon RX 7900 XTX"}, {}, {}, None, False),
    "rocm-02-2025-kv_cache_unified-zero-offload.txt": ({}, {"CPU_Mapped": 14965.61}, {"CPU": 640.0}, None, False),
    "rocm-03-2025-01-7900xtx-kv-and-draft-model.txt": ({"ROCm0": "AMD Radeon RX 7900 XTX"}, {}, {"ROCm0": 4352.0},
                                                       None, False),
    "rocm-04-2025-10-strix-halo-gfx1151-lmstudio.txt": ({"ROCm0": "AMD Radeon(TM) 8060S Graphics"}, {}, {}, None,
                                                        False),
    "rocm-05-2025-10-two-7900xtx-multi-gpu.txt": (
        {"ROCm0": "AMD Radeon RX 7900 XTX", "ROCm1": "AMD Radeon RX 7900 XTX"}, {}, {}, None, True),
    "rocm-06-2025-01-7900xtx-build4407-header.txt": ({"ROCm0": "AMD Radeon RX 7900 XTX"}, {}, {}, None, False),
    "rocm-07-2025-780m-apu-gfx1103.txt": ({"ROCm0": "AMD Radeon 780M Graphics"}, {}, {}, None, False),
    "rocm-08-2026-08-eight-r9700-device_info-lv4.txt": (
        {f"ROCm{i}": "AMD Radeon AI PRO R9700" for i in range(6)}, {}, {}, None, False),
    "rocm-09-fork-gfx906-4gpu-load_tensors.txt": (
        {}, {"CPU": 251.85, "ROCm0": 27022.95, "ROCm1": 26590.2, "ROCm2": 26590.2, "ROCm3": 23747.25}, {}, (63, 63),
        False),
    "sycl-01-2026-a770-fit-using-device-unknown-id.txt": ({"SYCL0": "Intel(R) Arc(TM) A770 Graphics"}, {}, {}, None,
                                                          False),
    "sycl-02-2026-06-arc-pro-b60-device_info.txt": ({"SYCL0": "Intel(R) Arc(TM) Pro B60 Graphics"}, {}, {}, None,
                                                    True),
    "sycl-03-2025-01-sycl0-kv-old-context-format.txt": ({}, {}, {"SYCL0": 4389.0}, None, False),
    "sycl-04-device-tables-old.txt": (
        {"SYCL0": "Intel(R) Arc(TM) A770 Graphics", "SYCL1": "Intel(R) UHD Graphics 770"}, {}, {}, None, False),
    "vulkan-01-2025-07-strix-halo-8060s-radv.txt": ({"Vulkan0": "Radeon 8060S Graphics (RADV GFX1151)"}, {}, {},
                                                    None, False),
    "vulkan-02-2025-08-vulkan-plus-rpc-multi-device.txt": (
        {}, {"Vulkan0": 96507.91, "RPC[10.0.2.242:50052]": 97323.94, "RPC[10.0.2.223:50052]": 103503.0,
             "RPC[10.0.2.209:50052]": 87857.67, "CPU": 497.11}, {}, (62, 62), False),
    "vulkan-03-2025-08-strix-halo-kv_cache_unified-oom.txt": ({}, {}, {"Vulkan0": 6564.0}, None, False),
    "vulkan-04-2025-04-init-prefix-kv.txt": ({}, {}, {"Vulkan0": 13800.0 + 19200.0}, None, False),
    "vulkan-05-device-lines-various.txt": ({"Vulkan0": "AMD Radeon RX 7900 XTX (RADV NAVI31)"}, {}, {}, None, False),
}


def _parse(name: str) -> LlamaLogParser:
    p = LlamaLogParser()
    for line in (LOGS / name).read_text(encoding="utf-8", errors="replace").splitlines():
        p.feed(line)
    return p


def _mib(d: dict[str, int]) -> dict[str, float]:
    return {k: round(v / MIB, 2) for k, v in d.items()}


def test_every_fixture_has_a_row() -> None:
    assert {p.name for p in LOGS.glob("*.txt")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_placement_lines(name: str) -> None:
    devices, model, kv, offloaded, hint = EXPECTED[name]
    p = _parse(name)
    c = p.config()
    assert {d.name: d.description for d in c.devices} == devices
    assert _mib(dict(c.model_buffer_bytes_by_device)) == model
    assert _mib(dict(c.kv_buffer_bytes_by_device)) == kv
    assert (None if c.offloaded_layers is None else (c.offloaded_layers, c.total_layers)) == offloaded
    assert (p.placement_hint() is not None) is hint, p.placement_hint()
    if devices:
        assert c.provenance["devices"] == "log"


def _dev(name: str, device: str) -> LogDevice:
    return next(d for d in _parse(name).config().devices if d.name == device)


def test_device_sizes_ids_and_unified_memory() -> None:
    # 2026: "using device CUDA0 (NVIDIA GeForce GTX 1080 Ti) (0000:03:00.0) - 8720 MiB free", breakdown total 11165
    d = _dev("cuda-05-2026-02-fit-memory-breakdown-gtx1080ti.txt", "CUDA0")
    assert (d.pci_bus_id, d.free_bytes, d.total_bytes) == ("0000:03:00.0", 8720 * MIB, 11165 * MIB)
    d = _dev("sycl-01-2026-a770-fit-using-device-unknown-id.txt", "SYCL0")  # "(unknown id)": no PCI id
    assert d.pci_bus_id is None and d.free_bytes == 15473 * MIB
    d = _dev("rocm-08-2026-08-eight-r9700-device_info-lv4.txt", "ROCm5")  # device_info: total and free
    assert (d.total_bytes, d.free_bytes) == (32624 * MIB, 32534 * MIB)
    assert _dev("vulkan-01-2025-07-strix-halo-8060s-radv.txt", "Vulkan0").unified_memory is True  # uma: 1
    assert _dev("vulkan-05-device-lines-various.txt", "Vulkan0").unified_memory is False
    assert _dev("metal-06-old-format-intel-mac-radeon-vii-partial.txt", "MTL0").unified_memory is False
    assert _dev("metal-01-2026-05-m1max-device-init-build9049.txt", "MTL0").unified_memory is True
    # SYCL's table: decimal MB in 2025+, bytes in the 2024 table
    assert _dev("sycl-04-device-tables-old.txt", "SYCL0").total_bytes == 16225243136
    assert _dev("sycl-02-2026-06-arc-pro-b60-device_info.txt", "SYCL0").total_bytes == 24480 * MIB


def test_metal_working_set_in_mb_since_december_2023_and_mib_before() -> None:
    # 2026: 22906.50 MB (decimal) on a 32 GB M1 Max; 40200.90 MB on an M5 Max
    assert _dev("metal-01-2026-05-m1max-device-init-build9049.txt", "MTL0").working_set_limit_bytes == 22_906_500_000
    assert _dev("metal-05-2026-04-m5max-recommended-working-set.txt", "MTL0").working_set_limit_bytes == 40_200_900_000
    # 2023 (ggml_metal_add_buffer era, decimal comma): "73728,00 MB" was MiB: 72 GiB of a 96 GB M2 Max
    assert _dev("metal-07-2023-m2max-96gb-recommended-73728.txt", "MTL0").working_set_limit_bytes == 72 * 1024**3
    # 2024: the "(used / limit)" pair of ggml_backend_metal_buffer_from_ptr, in MiB
    m1pro = _dev("metal-04-old-format-m1pro-2024.txt", "MTL0").working_set_limit_bytes
    assert m1pro == int(10922.67 * MIB)


def test_the_hint_names_verbosity_and_the_flag() -> None:
    hint = _parse("sycl-02-2026-06-arc-pro-b60-device_info.txt").placement_hint() or ""
    assert "verbosity 3" in hint and "-lv 4" in hint
    # b11549 at its default verbosity, as captured for kvmon's own tests
    p = LlamaLogParser()
    for line in (FIXTURES / "llama-server" / "speed-sweep" /
                 "server-stderr.f16.default-verbosity.txt").read_text().splitlines():
        p.feed(line)
    assert "verbosity 3" in (p.placement_hint() or "")
    full = _parse("cuda-11-2025-05-b5466-partial-offload-30of49.txt")
    assert full.placement_hint() is None  # its buffers say where the model lives


def test_ollamas_log_carries_its_childs_placement(tmp_path: Path) -> None:
    # Ollama's server log (its "server config" line, tests/fixtures/ollama) followed by a child's load block as
    # an Ollama 2025 log shows it (cuda-04, ollama #11986): the buffers per GPU come with the settings
    from kvmon.sources.ollama.child import ollama_log_config
    from kvmon.sources.ollama.source import _for_active_model

    fixtures = FIXTURES
    lines = [(fixtures / "ollama" / "server.log").read_text().splitlines()[0],
             "llama_model_loader: loaded meta data with 24 key-value pairs and 291 tensors from "
             "/usr/share/ollama/.ollama/models/blobs/sha256-abc (version GGUF V3 (latest))",
             *(LOGS / "cuda-04-ollama-2025-08-multi-gpu.txt").read_text().splitlines()]
    log = tmp_path / "ollama.log"
    log.write_text("\n".join(lines) + "\n")
    cfg, why = ollama_log_config(str(log))
    assert why is None and cfg is not None
    assert cfg.n_parallel == 2 and cfg.type_k == "q8_0"  # the server config line
    assert set(cfg.model_buffer_bytes_by_device) == {"CUDA0", "CUDA2", "CPU_Mapped"} and cfg.offloaded_layers == 81
    assert cfg.provenance["model_buffer_bytes_by_device"] == "log"
    reasons: dict[str, str] = {}
    same = _for_active_model(cfg, "/usr/share/ollama/.ollama/models/blobs/sha256-abc", reasons)
    assert same is cfg and not reasons
    other = _for_active_model(cfg, "/usr/share/ollama/.ollama/models/blobs/sha256-def", reasons)
    assert other is not None and not other.model_buffer_bytes_by_device and other.n_parallel == 2
    assert "another model" in reasons["log_placement"]




def _blocks() -> list[str]:
    return (LLAMA_FIXTURES / "kv-log-lines.txt").read_text().split("\n## ")[1:]


def test_kv_log_lines_every_block() -> None:
    expected = [
        # (kv MiB, type_k, flash_attn, n_ctx_total, n_parallel, kv_unified, compute MiB)
        (32, "f16", "on", 16384, 1, False, 21.52),
        (32, "f16", "off", 16384, 1, False, 163.51),
        (17, "q8_0", "on", 16384, 1, False, 21.55),
        (17, "q8_0", "on", 16384, 1, False, 21.55),
        None,  # failed to load: quantized V without flash attention
        (128, "f16", "on", 16384, 1, False, 38.02),
        (68, "q8_0", "on", 16384, 1, False, 38.10),
        (256, "f16", "on", 32768, 1, False, 54.02),
        (32, "f16", "on", 16384, 2, False, 13.52),
        (64, "f16", "on", 32768, 4, True, 37.52),
    ]
    blocks = _blocks()
    assert len(blocks) == len(expected)
    for block, exp in zip(blocks, expected, strict=True):
        c = parse_llama_log(block.splitlines())
        if exp is None:
            assert c.kv_bytes_allocated is None and c.n_ctx_total is None
            continue
        kv, tk, fa, nctx, npar, kvu, comp = exp
        assert c.kv_bytes_allocated == kv * MIB
        assert (c.type_k, c.type_v, c.flash_attn) == (tk, tk, fa)
        assert (c.n_ctx_total, c.n_parallel, c.kv_unified, c.n_ubatch) == (nctx, npar, kvu, 512)
        assert c.kv_buffer_bytes_by_device == {"CPU": kv * MIB}
        assert c.compute_buffer_bytes_by_device["CPU"] == round(comp * MIB)
        assert c.model_buffer_bytes_by_device["CPU_Mapped"] in (round(5.09 * MIB), round(138.39 * MIB))
        assert c.provenance["kv_bytes_allocated"] == "log"


def test_whole_file_keeps_only_the_latest_start() -> None:
    c = parse_llama_log((LLAMA_FIXTURES / "kv-log-lines.txt").read_text().splitlines())
    assert c.kv_bytes_allocated == 64 * MIB and c.n_parallel == 4  # the last run only, not a sum


def test_default_verbosity_stderr() -> None:
    for name in ("server-stderr.default-verbosity.txt", "speed-sweep/server-stderr.f16.default-verbosity.txt",
                 "speed-sweep/server-stderr.q8kv-fa.default-verbosity.txt"):
        c = parse_llama_log((LLAMA_FIXTURES / name).read_text(errors="replace").splitlines())
        assert c.n_parallel == 1 and c.kv_unified is False
        assert c.kv_bytes_allocated is None and c.type_k is None  # only printed at -lv 4


def test_older_spellings_and_gpu_lines() -> None:
    mid_2025 = [
        "llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 4090) - 23012 MiB free",
        "load_tensors: offloaded 29/33 layers to GPU",
        "load_tensors:        CUDA0 model buffer size =  3992.51 MiB",
        "load_tensors:   CPU_Mapped model buffer size =   281.81 MiB",
        "llama_context: n_ctx_per_seq = 8192",
        "llama_context: flash_attn    = 1",
        "llama_kv_cache_unified:      CUDA0 KV buffer size =   928.00 MiB",
        "llama_kv_cache_unified:        CPU KV buffer size =   128.00 MiB",
        "llama_kv_cache_unified: size = 1056.00 MiB (  8192 cells,  32 layers,  1 seqs), K (q8_0):  528.00 MiB, "
        "V (q8_0):  528.00 MiB",
        "llama_context:      CUDA0 compute buffer size =   560.00 MiB",
    ]
    c = parse_llama_log(mid_2025)
    assert c.device_free_bytes_by_device == {"CUDA0": 23012 * MIB}
    assert (c.offloaded_layers, c.total_layers) == (29, 33)
    assert c.model_buffer_bytes_by_device == {"CUDA0": round(3992.51 * MIB), "CPU_Mapped": round(281.81 * MIB)}
    assert c.kv_buffer_bytes_by_device == {"CUDA0": 928 * MIB, "CPU": 128 * MIB}
    assert c.kv_bytes_allocated == 1056 * MIB and c.type_k == "q8_0"
    assert c.flash_attn == "on"
    assert c.compute_buffer_bytes_by_device == {"CUDA0": 560 * MIB}
    early_2025 = [
        "llm_load_tensors: offloaded 33/33 layers to GPU",
        "llm_load_tensors:        CUDA0 buffer size =  4403.49 MiB",
        "llama_new_context_with_model: n_ctx      = 4096",
        "llama_new_context_with_model: flash_attn = 0",
        "llama_kv_cache_init:      CUDA0 KV buffer size =   512.00 MiB",
        "llama_new_context_with_model: KV self size  =  512.00 MiB, K (f16):  256.00 MiB, V (f16):  256.00 MiB",
        "llama_new_context_with_model:      CUDA0 compute buffer size =   296.00 MiB",
    ]
    c = parse_llama_log(early_2025)
    assert (c.offloaded_layers, c.total_layers, c.n_ctx_total, c.flash_attn) == (33, 33, 4096, "off")
    assert c.kv_bytes_allocated == 512 * MIB and (c.type_k, c.type_v) == ("f16", "f16")
    assert c.kv_buffer_bytes_by_device == {"CUDA0": 512 * MIB}


def test_swa_size_lines_add_up() -> None:
    lines = [
        "llama_kv_cache_iswa: creating non-SWA KV cache, size = 8192 cells",
        "llama_kv_cache: size =  160.00 MiB (  8192 cells,  10 layers,  1/1 seqs), K (f16):   80.00 MiB, "
        "V (f16):   80.00 MiB",
        "llama_kv_cache_iswa: creating     SWA KV cache, size = 1536 cells",
        "llama_kv_cache: size =  150.00 MiB (  1536 cells,  50 layers,  1/1 seqs), K (f16):   75.00 MiB, "
        "V (f16):   75.00 MiB",
    ]
    assert parse_llama_log(lines).kv_bytes_allocated == 310 * MIB


def test_ollama_wrapped_lines_and_garbage() -> None:
    p = LlamaLogParser()
    for line in ['time=2026-01-01T00:00:00 level=INFO source=server.go msg="llama_context: n_ctx = 8192"',
                 "\x00\xff garbage line", "", "llama_kv_cache: size = lots MiB", "offloaded x/y layers to GPU"]:
        p.feed(line)
    c = p.config()
    assert c.n_ctx_total == 8192 and c.kv_bytes_allocated is None and c.offloaded_layers is None


def test_log_follower_appends_truncates_and_missing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "server.log"
    f = LogFollower(str(log))
    f.poll()
    assert f.error and "cannot read" in f.error
    blocks = _blocks()
    log.write_text(blocks[0][: len(blocks[0]) // 2])
    f.poll()
    with open(log, "a") as fh:
        fh.write(blocks[0][len(blocks[0]) // 2 :] + "\n")
    c = f.poll()
    assert f.error is None and c.kv_bytes_allocated == 32 * MIB
    log.write_text(blocks[2] + "\n")  # shorter: a new run
    assert f.poll().type_k == "q8_0"


def test_log_follower_reads_a_pipe() -> None:
    import io

    from helpers_http import wait_until

    stream = io.StringIO(_blocks()[5])  # the large model, f16, 128 MiB
    f = LogFollower("-", stream=stream)
    assert wait_until(lambda: f.poll().kv_bytes_allocated == 128 * MIB, 5.0)
    assert f.error is None


def test_draft_model_load_does_not_reset_and_restart_does() -> None:
    kv = ("llama_kv_cache: size = {} MiB ( 4096 cells,  8 layers,  1/1 seqs), K (f16): {} MiB, V (f16): {} MiB")
    lines = [
        "0.00.001 I srv    load_model: loading model 'main.gguf'",
        "llama_model_loader: loaded meta data with 30 key-value pairs",
        kv.format("64.00", "32.00", "32.00"),
        "0.00.900 I srv    load_model: loading draft model 'draft.gguf'",
        "llama_model_loader: loaded meta data with 25 key-value pairs",
        kv.format("8.00", "4.00", "4.00"),
    ]
    c = parse_llama_log(lines)  # the model's cache and the draft's, each its own (both held by the server)
    assert (c.kv_bytes_allocated, c.draft_kv_bytes_allocated) == (64 * MIB, 8 * MIB)
    restarted = [*lines, "0.00.001 I srv  llama_server: initializing ...", kv.format("16.00", "8.00", "8.00")]
    c = parse_llama_log(restarted)
    assert (c.kv_bytes_allocated, c.draft_kv_bytes_allocated) == (16 * MIB, None)


def test_auto_parallel_line_before_loading_model_survives() -> None:
    lines = [
        "0.00.001.889 I srv  llama_server: initializing ...",
        "0.00.002.941 I srv  llama_server: n_parallel is set to auto, using n_parallel = 4 and kv_unified = true",
        "0.00.007.166 I srv    load_model: loading model 'tiny-llama-e256-l4.gguf'",
        "0.00.013.528 I llama_context: n_ctx                 = 32768",
    ]
    c = parse_llama_log(lines)
    assert (c.n_parallel, c.kv_unified, c.n_ctx_total) == (4, True, 32768)


@pytest.mark.parametrize(("line", "name", "desc", "pci", "free_mib"), [
    ("llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce GTX 1080 Ti) (0000:03:00.0) - 8720 MiB free",
     "CUDA0", "NVIDIA GeForce GTX 1080 Ti", "0000:03:00.0", 8720),
    ("llama_load_model_from_file: using device ROCm0 (AMD Radeon RX 7900 XTX) - 1840 MiB free",
     "ROCm0", "AMD Radeon RX 7900 XTX", None, 1840),
    ("llama_model_load_from_file_impl: using device Vulkan0 (Radeon 8060S Graphics (RADV GFX1151)) - 87722 MiB free",
     "Vulkan0", "Radeon 8060S Graphics (RADV GFX1151)", None, 87722),
    ("llama_model_load_from_file_impl: using device SYCL0 (Intel(R) Arc(TM) A770 Graphics) (unknown id) - 15473 MiB "
     "free", "SYCL0", "Intel(R) Arc(TM) A770 Graphics", None, 15473),
    ("llama_model_load_from_file_impl: using device Metal (Apple M2 Max) - 49151 MiB free",
     "MTL0", "Apple M2 Max", None, 49151),
    ("llama_load_model_from_file: using device Metal (Apple M1 Pro)  10922 MiB free",  # no dash (older builds)
     "MTL0", "Apple M1 Pro", None, 10922),
])
def test_one_reading_of_the_using_device_line(line: str, name: str, desc: str, pci: str | None,
                                              free_mib: int) -> None:
    """The device list and the free-memory map read the line through one parser and agree, Metal included."""
    c = parse_llama_log([line])
    assert c.device_free_bytes_by_device == {name: free_mib * MIB}
    (dev,) = c.devices
    assert (dev.name, dev.description, dev.pci_bus_id, dev.free_bytes) == (name, desc, pci, free_mib * MIB)
