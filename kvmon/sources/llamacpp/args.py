"""Read a llama-server command line and ``LLAMA_ARG_*`` environment into a ``ServerConfig``.

No endpoint tells the KV cache type, flash attention, GPU layers or the total context; a local server's
own argv does. Short and long forms, ``--flag=value`` and environment variables are accepted; settings
that are absent get llama-server's defaults, marked ``default`` in the provenance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from kvmon.core.jsonvals import text_int
from kvmon.core.readings import DRAFT_MODEL, MTP_LAYERS, NGRAM, Provenance, ServerConfig
from kvmon.core.units import MIB
from kvmon.physics.cache_types import CACHE_TYPES
from kvmon.physics.kv import DEFAULT_N_BATCH, DEFAULT_N_UBATCH
from kvmon.sources.llamacpp import LLAMA_SERVER

# flag spellings -> setting; each setting also has its LLAMA_ARG_* variable
_VALUE_FLAGS: dict[str, str] = {
    "-c": "ctx",
    "--ctx-size": "ctx",
    "-np": "parallel",
    "--parallel": "parallel",
    "-ctk": "type_k",
    "--cache-type-k": "type_k",
    "-ctv": "type_v",
    "--cache-type-v": "type_v",
    "-ngl": "ngl",
    "--gpu-layers": "ngl",
    "--n-gpu-layers": "ngl",
    "-m": "model",
    "--model": "model",
    "-md": "model_draft",
    "--model-draft": "model_draft",
    "--spec-draft-model": "model_draft",
    "--spec-type": "spec_type",
    "-ctkd": "draft_type_k",
    "--spec-draft-type-k": "draft_type_k",
    "--cache-type-k-draft": "draft_type_k",
    "-ctvd": "draft_type_v",
    "--spec-draft-type-v": "draft_type_v",
    "--cache-type-v-draft": "draft_type_v",
    "-ub": "ubatch",
    "--ubatch-size": "ubatch",
    "-b": "batch",
    "--batch-size": "batch",
    "--host": "host",
    "--port": "port",
    "--sleep-idle-seconds": "sleep",
    "-fitt": "fit_target",
    "--fit-target": "fit_target",
    "-cram": "cache_ram",
    "--cache-ram": "cache_ram",
    "-t": "threads",
    "--threads": "threads",
}
_ENV: dict[str, str] = {
    "LLAMA_ARG_CTX_SIZE": "ctx",
    "LLAMA_ARG_N_PARALLEL": "parallel",
    "LLAMA_ARG_CACHE_TYPE_K": "type_k",
    "LLAMA_ARG_CACHE_TYPE_V": "type_v",
    "LLAMA_ARG_N_GPU_LAYERS": "ngl",
    "LLAMA_ARG_MODEL": "model",
    "LLAMA_ARG_MODEL_DRAFT": "model_draft",
    "LLAMA_ARG_SPEC_TYPE": "spec_type",
    "LLAMA_ARG_CACHE_TYPE_K_DRAFT": "draft_type_k",
    "LLAMA_ARG_CACHE_TYPE_V_DRAFT": "draft_type_v",
    "LLAMA_ARG_UBATCH": "ubatch",
    "LLAMA_ARG_BATCH": "batch",
    "LLAMA_ARG_HOST": "host",
    "LLAMA_ARG_THREADS": "threads",
    "LLAMA_ARG_PORT": "port",
    "LLAMA_ARG_FLASH_ATTN": "fa",
    "LLAMA_ARG_KV_UNIFIED": "kvu",
    "LLAMA_ARG_SWA_FULL": "swa_full",
    "LLAMA_ARG_FIT": "fit",
    "LLAMA_ARG_FIT_TARGET": "fit_target",
    "LLAMA_ARG_CACHE_RAM": "cache_ram",
}
_ON_OFF_FLAGS = {"-fa": "fa", "--flash-attn": "fa", "-fit": "fit", "--fit": "fit"}
_FA_WORDS = {
    "on": "on",
    "off": "off",
    "auto": "auto",
    "true": "on",
    "false": "off",
    "1": "on",
    "0": "off",
    "enabled": "on",
    "disabled": "off",
}
# switches without a value: (setting, value)
_SWITCHES = {"-kvu": ("kvu", "1"), "--kv-unified": ("kvu", "1"), "-no-kvu": ("kvu", "0"),
             "--no-kv-unified": ("kvu", "0"), "--swa-full": ("swa_full", "1")}

T = TypeVar("T")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = LLAMA_SERVER.ports[0]
DEFAULT_FIT_TARGET_MIB = 1024  # common.h fit_params_target: 1 GiB left free on every device
DEFAULT_CACHE_RAM_MIB = 8192  # common.h cache_ram_mib: the host prompt cache, 8 GiB


@dataclass(frozen=True)
class LlamaServerArgs:
    """What a llama-server command line says: the config plus where it listens, and notes on odd values."""

    config: ServerConfig
    host: str  # the default where the line does not say
    port: int
    notes: tuple[str, ...] = ()


def _to_int(text: str | None) -> int | None:
    """A command line's integer (``-1`` allowed: llama-server's "auto"/"never"); None when it is not one."""
    if text is None:
        return None
    t = text.strip()
    n = text_int(t.removeprefix("-"))
    return None if n is None else -n if t.startswith("-") else n


def _truthy(text: str) -> bool:
    return text.strip().lower() in ("1", "true", "on", "yes", "enabled")


def parse_llama_server_args(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> LlamaServerArgs:
    """Settings from ``argv`` (argv[0] may be the program) and ``LLAMA_ARG_*``; absent ones get defaults."""
    raw: dict[str, str] = {}
    src: dict[str, Provenance] = {}
    notes: list[str] = []
    for var, key in _ENV.items():
        if environ and var in environ:
            raw[key] = environ[var]
            src[key] = Provenance.COMMAND_LINE
    for var, value in (environ or {}).items():
        if var.startswith("LLAMA_ARG_") and "SLEEP" in var:  # the idle-sleep setting by environment
            raw["sleep"], src["sleep"] = value, Provenance.COMMAND_LINE
    args = [str(a) for a in argv]
    i = 0
    while i < len(args):
        a = args[i]
        flag, eq, inline = a.partition("=") if a.startswith("-") else (a, "", "")
        if flag in _VALUE_FLAGS:
            key = _VALUE_FLAGS[flag]
            if eq:
                raw[key] = inline
            elif i + 1 < len(args):
                raw[key] = args[i + 1]
                i += 1
            else:
                notes.append(f"{flag} without a value")
            src[key] = Provenance.COMMAND_LINE
        elif flag in _ON_OFF_FLAGS:  # -fa / -fit on|off|auto; a bare one (older builds' -fa switch): on
            key = _ON_OFF_FLAGS[flag]
            if eq:
                raw[key] = inline
            elif i + 1 < len(args) and args[i + 1].lower() in _FA_WORDS:
                raw[key] = args[i + 1]
                i += 1
            else:
                raw[key] = "on"
            src[key] = Provenance.COMMAND_LINE
        elif flag in _SWITCHES:
            key, value = _SWITCHES[flag]
            raw[key], src[key] = value, Provenance.COMMAND_LINE
        i += 1

    prov: dict[str, Provenance] = {}

    def mark(field: str, key: str, value: T) -> T:
        """``value``; when it is set, its provenance (the command line's where it said it, else the default)."""
        if value is not None:
            prov[field] = src.get(key, Provenance.DEFAULT)
        return value

    def positive(key: str) -> int | None:
        """A count the line sets; 0, -1 or absent leave it to the server (``-c 0``: the training context)."""
        n = _to_int(raw.get(key))
        return n if n and n > 0 else None

    if "ctx" in raw and _to_int(raw["ctx"]) is None:
        notes.append(f"unreadable context size {raw['ctx']!r}")
    n_ctx_total = mark("n_ctx_total", "ctx", positive("ctx"))
    n_parallel = mark("n_parallel", "parallel", positive("parallel"))  # -1 / absent: auto (4 slots, unified)

    if "kvu" in raw:
        kv_unified = mark("kv_unified", "kvu", _truthy(raw["kvu"]))
    else:
        kv_unified = n_parallel is None  # auto parallel turns the unified KV cache on
        prov["kv_unified"] = Provenance.DEFAULT

    types: dict[str, str] = {}
    for field, key in (("type_k", "type_k"), ("type_v", "type_v"), ("draft_type_k", "draft_type_k"),
                       ("draft_type_v", "draft_type_v")):
        if key.startswith("draft") and key not in raw:  # the draft context's types: only when the line says them
            types[field] = ""
            continue
        name = raw.get(key, "f16").strip().lower()
        if name not in CACHE_TYPES:
            notes.append(f"unknown KV cache type {name!r}")
            name = ""
        types[field] = name
        if name:
            mark(field, key, name)

    fa_raw = raw.get("fa", "auto").strip().lower()
    flash_attn = mark("flash_attn", "fa", _FA_WORDS.get(fa_raw))
    if flash_attn is None:
        notes.append(f"unknown flash-attention setting {fa_raw!r}")

    ngl_raw = raw.get("ngl")
    n_gpu_layers = mark("n_gpu_layers", "ngl", _to_int(ngl_raw))
    if n_gpu_layers is None and ngl_raw is not None and ngl_raw.strip().lower() not in ("auto", "all"):
        notes.append(f"unreadable GPU layer count {ngl_raw!r}")

    # llama.cpp caps the logical batch at the context and the physical one at the batch (llama_context)
    n_batch = positive("batch") or DEFAULT_N_BATCH
    n_batch = mark("n_batch", "batch", min(n_batch, n_ctx_total) if n_ctx_total is not None else n_batch)
    n_ubatch = mark("n_ubatch", "ubatch" if "ubatch" in src else "batch",
                    min(positive("ubatch") or DEFAULT_N_UBATCH, n_batch))
    # sliding-window layers sized to the whole context
    swa_full = mark("swa_full", "swa_full", _truthy(raw.get("swa_full", "0")))

    model_path = mark("model_path", "model", raw.get("model") or None)
    # speculative decoding's draft model (-md)
    draft_model_path = mark("draft_model_path", "model_draft", raw.get("model_draft") or None)
    spec_types = mark("spec_types", "spec_type", _spec_types(raw.get("spec_type"), notes))
    drafter = _drafter(spec_types, draft_model_path)
    if drafter is not None:
        prov["drafter"] = Provenance.COMMAND_LINE

    # idle sleep (the model unloaded after N idle seconds; -1, the default, never): an unreadable value is taken
    # as "may sleep", the safe side (polling /slots would wake a sleeping server)
    sleep_raw = raw.get("sleep")
    sleep_idle_seconds = -1 if sleep_raw is None else _to_int(sleep_raw)
    if sleep_raw is not None and sleep_idle_seconds is None:
        notes.append(f"unreadable idle-sleep setting {sleep_raw!r}")
        sleep_idle_seconds = 0
    mark("sleep_idle_seconds", "sleep", sleep_idle_seconds)

    fit, fit_target, cache_ram = _memory_settings(raw, notes)
    mark("fit", "fit", fit)
    mark("fit_target_bytes", "fit_target", fit_target)
    mark("prompt_cache_limit_bytes", "cache_ram", cache_ram)
    # absent or -1: llama.cpp picks the physical cores (not known here)
    n_threads = mark("n_threads", "threads", positive("threads"))

    host = raw.get("host") or DEFAULT_HOST
    port = _to_int(raw.get("port"))
    if port is None:
        port = DEFAULT_PORT

    config = ServerConfig(
        n_ctx_total=n_ctx_total,
        n_parallel=n_parallel,
        kv_unified=kv_unified,
        type_k=types["type_k"] or None,
        type_v=types["type_v"] or None,
        flash_attn=flash_attn,
        n_gpu_layers=n_gpu_layers,
        n_ubatch=n_ubatch,
        n_batch=n_batch,
        swa_full=swa_full,
        model_path=model_path,
        draft_model_path=draft_model_path,
        spec_types=spec_types,
        drafter=drafter,
        draft_type_k=types["draft_type_k"] or None,
        draft_type_v=types["draft_type_v"] or None,
        sleep_idle_seconds=sleep_idle_seconds,
        fit=fit,
        fit_target_bytes=fit_target,
        prompt_cache_limit_bytes=cache_ram,
        n_threads=n_threads,
        provenance=prov,
    )
    return LlamaServerArgs(config=config, host=host, port=port, notes=tuple(notes))


def _spec_types(text: str | None, notes: list[str]) -> tuple[str, ...] | None:
    """``--spec-type a,b``: the speculative decoders, as llama-server names them ("draft-mtp", "ngram-simple"); None
    when the line does not say (llama-server's default is none, unless a draft model is given)."""
    if text is None:
        return None
    words = tuple(w.strip().lower() for w in text.split(",") if w.strip())
    if not words or any(not w.replace("-", "").replace("_", "").isalnum() or len(w) > 40 for w in words):
        notes.append(f"unreadable --spec-type {text[:40]!r}")
        return None
    return words


def _drafter(spec_types: tuple[str, ...] | None, draft_model_path: str | None) -> str | None:
    """What drafts the tokens: a draft model (``-md``, or a ``draft-*`` type that loads one), the model's own MTP
    layers (``draft-mtp``), n-gram lookup (``ngram-*``); None when the command line names no speculation."""
    types = spec_types or ()
    if "draft-mtp" in types:
        return MTP_LAYERS
    if draft_model_path or any(t.startswith("draft-") for t in types):
        return DRAFT_MODEL
    if any(t.startswith("ngram") for t in types):
        return NGRAM
    return None


def _memory_settings(raw: dict[str, str], notes: list[str]) -> tuple[bool, tuple[int, ...], int]:
    """(--fit, --fit-target in bytes per device, --cache-ram in bytes: -1 no limit, 0 off), defaults filled in."""
    fit_word = _FA_WORDS.get(raw.get("fit", "on").strip().lower())
    if fit_word is None:
        notes.append(f"unknown --fit setting {raw['fit']!r}")
    fit = fit_word != "off"
    target: tuple[int, ...] = (DEFAULT_FIT_TARGET_MIB * MIB,)
    if "fit_target" in raw:  # MiB per device, separated by , or /; one value is every device's
        parts = [p for p in raw["fit_target"].replace("/", ",").split(",") if p.strip()]
        mib = [_to_int(p) for p in parts]
        if mib and all(m is not None and m >= 0 for m in mib):
            target = tuple(int(m) * MIB for m in mib if m is not None)
        else:
            notes.append(f"unreadable --fit-target {raw['fit_target']!r}")
    cache = DEFAULT_CACHE_RAM_MIB * MIB
    if "cache_ram" in raw:
        mib_ram = _to_int(raw["cache_ram"])
        if mib_ram is None or mib_ram < -1:
            notes.append(f"unreadable --cache-ram {raw['cache_ram']!r}")
        else:
            cache = -1 if mib_ram == -1 else mib_ram * MIB
    return fit, target, cache
