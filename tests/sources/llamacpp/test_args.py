"""llama-server settings from the command line, LLAMA_ARG_* environment and log lines."""

from __future__ import annotations

import pytest

from kvmon.core.readings import ServerConfig
from kvmon.sources.llamacpp.args import parse_llama_server_args


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


# ---- log ---------------------------------------------------------------------------------------
