"""llama-server settings from the command line, LLAMA_ARG_* environment and log lines."""

from __future__ import annotations

import pytest
from helpers_http import LLAMA_FIXTURES

from kvmon.core.readings import ServerConfig
from kvmon.sources.config import merge_configs
from kvmon.sources.llamacpp.args import parse_llama_server_args
from kvmon.sources.llamacpp.log import LlamaLogParser, LogFollower, parse_llama_log
from kvmon.sources.llamacpp.process import looks_like_llama_server

MIB = 1024 * 1024


def test_short_forms() -> None:
    a = parse_llama_server_args(
        ["llama-server", "-m", "m.gguf", "-c", "16384", "-np", "2", "-ctk", "q8_0", "-ctv", "q4_0", "-fa", "on",
         "-ngl", "99", "-ub", "256", "--host", "0.0.0.0", "--port", "8089"]
    )
    c = a.config
    assert (c.model_path, c.n_ctx_total, c.n_parallel, c.type_k, c.type_v) == ("m.gguf", 16384, 2, "q8_0", "q4_0")
    assert (c.flash_attn, c.n_gpu_layers, c.n_ubatch, c.kv_unified) == ("on", 99, 256, False)
    assert (a.host, a.port) == ("0.0.0.0", 8089)
    assert c.provenance["type_k"] == "command_line"
    assert c.provenance["kv_unified"] == "default"


def test_long_forms_and_equals() -> None:
    c = parse_llama_server_args(
        ["--model=/m/x.gguf", "--ctx-size=8192", "--parallel=4", "--cache-type-k=q8_0", "--cache-type-v", "Q8_0",
         "--flash-attn=off", "--n-gpu-layers", "20", "--kv-unified", "--ubatch-size=1024"]
    ).config
    assert (c.model_path, c.n_ctx_total, c.n_parallel, c.type_k, c.type_v) == ("/m/x.gguf", 8192, 4, "q8_0", "q8_0")
    assert (c.flash_attn, c.n_gpu_layers, c.kv_unified, c.n_ubatch) == ("off", 20, True, 1024)
    assert parse_llama_server_args(["--gpu-layers", "7"]).config.n_gpu_layers == 7


def test_defaults() -> None:
    a = parse_llama_server_args(["llama-server", "-m", "m.gguf"])
    c = a.config
    assert (c.type_k, c.type_v, c.flash_attn, c.n_ubatch) == ("f16", "f16", "auto", 512)
    assert c.n_ctx_total is None  # -c 0 = the model's training context, unknown from argv alone
    assert c.n_parallel is None and c.kv_unified is True  # -np auto turns unified KV on
    assert c.n_gpu_layers is None  # auto
    assert c.provenance["type_k"] == "default" and "n_ctx_total" not in c.provenance
    assert (a.host, a.port) == ("127.0.0.1", 9931)  # common.h `port = 9931` in b11549 (8080 before)
    # the memory defaults of b11549's common.h: --fit on with 1 GiB left free per device, an 8 GiB host prompt cache
    assert (c.fit, c.fit_target_bytes, c.prompt_cache_limit_bytes) == (True, (1024 * 1024**2,), 8192 * 1024**2)
    assert c.provenance["fit"] == c.provenance["prompt_cache_limit_bytes"] == "default"


def test_fit_and_host_prompt_cache_settings() -> None:
    mib = 1024**2
    c = parse_llama_server_args(["-fit", "off", "--fit-target", "256,512", "--cache-ram", "2048"]).config
    assert (c.fit, c.fit_target_bytes, c.prompt_cache_limit_bytes) == (False, (256 * mib, 512 * mib), 2048 * mib)
    assert c.provenance["fit_target_bytes"] == "command_line"
    assert parse_llama_server_args(["-cram", "-1"]).config.prompt_cache_limit_bytes == -1  # no limit
    assert parse_llama_server_args(["--cache-ram=0"]).config.prompt_cache_limit_bytes == 0  # off
    assert parse_llama_server_args(["--fit=off"]).config.fit is False
    assert parse_llama_server_args(["-fitt", "64/128"]).config.fit_target_bytes == (64 * mib, 128 * mib)
    env = parse_llama_server_args([], {"LLAMA_ARG_CACHE_RAM": "1024", "LLAMA_ARG_FIT": "off"}).config
    assert (env.prompt_cache_limit_bytes, env.fit) == (1024 * mib, False)
    bad = parse_llama_server_args(["--cache-ram", "lots", "--fit-target", "x"])
    assert bad.config.prompt_cache_limit_bytes == 8192 * mib  # the default stays, and the notes say why
    assert "unreadable --cache-ram 'lots'" in bad.notes and "unreadable --fit-target 'x'" in bad.notes


def test_old_flash_attn_switch_and_no_kvu() -> None:
    c = parse_llama_server_args(["-fa", "-m", "x.gguf", "-np", "4", "--no-kv-unified"]).config
    assert c.flash_attn == "on" and c.model_path == "x.gguf" and c.kv_unified is False


def test_environment_and_argv_precedence() -> None:
    env = {"LLAMA_ARG_CTX_SIZE": "4096", "LLAMA_ARG_CACHE_TYPE_K": "q4_0", "LLAMA_ARG_FLASH_ATTN": "on",
           "LLAMA_ARG_N_PARALLEL": "3", "LLAMA_ARG_MODEL": "/e.gguf", "LLAMA_ARG_PORT": "9000"}
    a = parse_llama_server_args(["llama-server", "-c", "2048"], env)
    assert a.config.n_ctx_total == 2048  # the command line wins
    assert (a.config.type_k, a.config.flash_attn, a.config.n_parallel) == ("q4_0", "on", 3)
    assert a.config.model_path == "/e.gguf" and a.port == 9000


@pytest.mark.parametrize(
    "argv",
    [["-c"], ["-c", "lots"], ["-ctk", "q3_k"], ["-fa=maybe"], ["-ngl", "many"], ["--port", "x"], ["-np", "-1"]],
)
def test_bad_values_give_notes_not_errors(argv: list[str]) -> None:
    a = parse_llama_server_args(argv)
    assert isinstance(a.config, ServerConfig)
    if argv != ["-np", "-1"]:
        assert a.notes or a.port == 9931  # an unreadable --port: the default one
    assert a.config.n_parallel is None


def test_idle_sleep_from_argv_or_environment() -> None:
    """Absent: llama-server's default, it never sleeps (-1); a value from either place; nonsense: may sleep."""
    assert parse_llama_server_args(["llama-server", "-m", "x.gguf"]).config.sleep_idle_seconds == -1
    assert parse_llama_server_args(["--sleep-idle-seconds", "300"]).config.sleep_idle_seconds == 300
    assert parse_llama_server_args(["--sleep-idle-seconds=60"]).config.sleep_idle_seconds == 60
    env = {"LLAMA_ARG_SLEEP_IDLE_SECONDS": "120"}
    assert parse_llama_server_args([], env).config.sleep_idle_seconds == 120
    odd = parse_llama_server_args(["--sleep-idle-seconds", "soon"])
    assert odd.config.sleep_idle_seconds == 0 and any("idle-sleep" in n for n in odd.notes)


def test_looks_like_llama_server() -> None:
    assert looks_like_llama_server(["/usr/bin/llama-server", "-m", "x"], None)
    assert looks_like_llama_server(["python3", "fake.py", "--model", "x.gguf"], None)
    assert not looks_like_llama_server(["python3", "-m", "http.server"], {})
    assert looks_like_llama_server(["python3", "x.py"], {"LLAMA_ARG_MODEL": "/m.gguf"})
    assert not looks_like_llama_server(["nginx"], {})
    assert not looks_like_llama_server([], {})


# ---- log ---------------------------------------------------------------------------------------

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
