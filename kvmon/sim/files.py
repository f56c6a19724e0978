"""Files a real llama-server leaves for a monitor to read: its log and the model's GGUF file.

The simulator writes both into a folder of its own, so kvmon's llama-server source reads the simulated
server exactly as a real one: ``/props`` ``model_path`` points at a GGUF that holds the model's metadata
and its tensor directory (the data left as a hole in a sparse file), and each (re)load appends the ``-lv 4``
load-time lines (layers offloaded, buffers per device, the KV cache size line) to the log.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Sequence
from typing import Any

from kvmon.core.units import MIB
from kvmon.sim.model import LoadedModel
from kvmon.sim.quantize import TypedTensor
from kvmon.sim.scenarios import Scenario


def write_gguf_header(path: str, metadata: dict[str, Any], tensors: Sequence[TypedTensor] | None = None) -> None:
    """A GGUF file with the model's metadata and, when given, its tensor directory: every tensor's name, shape and
    type at the offset a real file has it, and the file as long as a real one (sparse: the data is never written,
    so a 16 GB model takes no disk). Without ``tensors`` the directory is empty (a header only)."""
    import gguf
    import numpy as np

    arch = str(metadata.get("general.architecture", "llama"))
    writer = gguf.GGUFWriter(path, arch)
    for t in tensors or ():  # gguf-py takes the numpy order (outermost first); the file holds GGUF's
        writer.add_tensor_info(t.name, tuple(reversed(t.shape)), np.dtype(np.float32), t.n_bytes, t.ggml_type)
    for key, value in metadata.items():
        if key in ("general.architecture", "GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"):
            continue
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value) if 0 <= value < 2**32 else writer.add_uint64(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        elif isinstance(value, str):
            writer.add_string(key, value)
        elif isinstance(value, (list, tuple)) and value:
            writer.add_array(key, list(value))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    align = writer.data_alignment
    data_bytes = sum(-(-t.n_bytes // align) * align for t in tensors or ())
    writer.close()
    with open(path, "r+b") as f:
        end = f.seek(0, os.SEEK_END)
        f.truncate(-(-end // align) * align + data_bytes)  # the data section, as a hole


def write_safetensors(path: str, tensors: Sequence[tuple[str, str, tuple[int, ...]]]) -> int:
    """A safetensors file of ``(name, dtype, shape)`` tensors as the format lays it out (u64 header length, the JSON
    header padded with spaces to 8 bytes, then the data back to back), the data a hole; returns its data bytes."""
    import json
    import struct

    bits = {"BF16": 16, "F16": 16, "F32": 32, "I32": 32, "U8": 8, "I8": 8, "F8_E4M3": 8}
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape in tensors:
        size = math.prod(shape) * bits[dtype] // 8
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + offset)
    return offset


def gguf_metadata(model: LoadedModel) -> dict[str, Any]:
    """The GGUF keys of the model's file: the preset's shape keys, ``general.name`` as real files have it (the model's
    name, without the preset's note on its shape) and ``general.file_type`` (llama.cpp's number for its type)."""
    import gguf

    md: dict[str, Any] = {**model.preset.metadata, "general.name": model.preset.display_name.split(" (")[0]}
    ftype = gguf.LlamaFileType.__members__.get("MOSTLY_" + model.quantization.upper())
    if model.quantization.upper() == "F32":
        ftype = gguf.LlamaFileType.ALL_F32
    if ftype is not None:
        md["general.file_type"] = int(ftype)
    return md


def _stamp(t_s: float) -> str:
    """llama.cpp's log time prefix: minutes.seconds.milliseconds.microseconds since start."""
    us = int(max(0.0, t_s) * 1e6)
    return f"{us // 60_000_000}.{us // 1_000_000 % 60:02d}.{us // 1000 % 1000:03d}.{us % 1000:03d}"


class ServerLog:
    """Appends llama-server's log lines to ``path`` (thread-safe).

    ``ollama``: the log is Ollama's ``server.log``: its own lines in Go's ``slog`` text format, and its model server's
    lines as that child prints them to the stderr Ollama copies in (``--no-log-prefix --no-log-timestamps``).
    """

    def __init__(self, path: str, *, ollama: bool = False) -> None:
        self.path = path
        self.ollama = ollama
        self._lock = threading.Lock()
        with open(path, "w", encoding="utf-8"):
            pass

    def write(self, t_s: float, lines: list[str]) -> None:
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            for ln in lines:
                f.write(f"{ln}\n" if self.ollama else f"{_stamp(t_s)} I {ln}\n")

    def ollama_line(self, source: str, msg: str, **attrs: str) -> None:
        """One of Ollama's own lines: ``time=… level=INFO source=… msg="…" key="value"``."""
        from datetime import datetime, timezone

        now = datetime.now(timezone.utc)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"
        extra = "".join(f' {k}="{v}"' for k, v in attrs.items())
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(f'time={stamp} level=INFO source={source} msg="{msg}"{extra}\n')

    def load_block(self, model: LoadedModel, t_s: float, gpu_name: str, free_bytes: list[int],
                   model_path: str) -> None:
        """The lines one model load prints at ``-lv 4``: devices, layers, buffers, context, KV, slots.

        The devices are named as the real backends name them (``ggml_cuda_init``'s list and ``using device
        CUDA0 (…) (0000:01:00.0)``; Metal's ``GPU name: MTL0 (Apple M2 Max)`` and working set; a CPU-only build
        names none and prints no "offloaded" line), so the log alone tells a monitor where the model lives.
        """
        s = model.scenario
        a = model.allocation
        p = model.placement
        dev = "MTL0" if s.device == "metal" else "CUDA"
        names = [f"{dev}{i}" if dev == "CUDA" else dev for i in range(s.n_gpus)]
        lines = ["cmn  common_param: common_params_print_info: build 11549 (unknown) with GNU 12.2.0 for Linux x86_64"]
        lines += self._device_lines(s, model, gpu_name, free_bytes)
        lines.append(f"llama_model_loader: loaded meta data with {len(model.preset.metadata)} key-value pairs "
                     f"from {model_path}")
        if s.device != "cpu":
            lines.append(f"load_tensors: offloaded {sum(p.gpu_layers) + (0 if p.cpu_layers else 1)}/"
                         f"{model.n_layers + 1} layers to GPU")
        bufs = [f"{n}_Mapped" for n in names] if dev == "MTL0" else names
        lines += [f"load_tensors: {bufs[i]:>12s} model buffer size = {w / MIB:10.2f} MiB"
                  for i, w in enumerate(p.weight_bytes_gpu) if w]
        lines.append(f"load_tensors: {'CPU_Mapped':>12s} model buffer size = "
                     f"{(p.weight_bytes_host + model.host_embedding_bytes) / MIB:10.2f} MiB")
        n_ctx = model.n_ctx
        fa = {"on": "enabled", "off": "disabled"}.get(s.flash_attn, "auto")
        for name, value in (("n_ctx", n_ctx), ("n_ctx_seq", n_ctx // s.n_parallel), ("n_batch", 2048),
                            ("n_ubatch", 512), ("flash_attn", fa), ("kv_unified", "false")):
            lines.append(f"llama_context: {name:<21s} = {value}")
        kv = a.k_bytes + a.v_bytes
        lines += [f"llama_kv_cache: {names[i]:>10s} KV buffer size = {kv * n / model.n_layers / MIB:8.2f} MiB"
                  for i, n in enumerate(p.gpu_layers) if n]
        if p.cpu_layers:
            lines.append(f"llama_kv_cache: {'CPU':>10s} KV buffer size = "
                         f"{kv * p.cpu_layers / model.n_layers / MIB:8.2f} MiB")
        lines.append(f"llama_kv_cache: size = {kv / MIB:8.2f} MiB ({a.cells:6d} cells, {a.n_kv_layers:3d} layers, "
                     f"{s.n_parallel}/{s.n_parallel} seqs), K ({s.type_k}): {a.k_bytes / MIB:8.2f} MiB, "
                     f"V ({s.type_v}): {a.v_bytes / MIB:8.2f} MiB")
        if a.recurrent_bytes:
            rs_dev = names[0] if names else "CPU"
            lines.append(f"llama_memory_recurrent: {rs_dev:>10s} RS buffer size = {a.recurrent_bytes / MIB:8.2f} MiB")
        if fa == "enabled":
            lines.append("resolve_fused_ops: Flash Attention enabled")
        lines += [f"sched_reserve: {names[i]:>10s} compute buffer size = {s.compute_buffer_bytes / MIB:8.2f} MiB"
                  for i, n in enumerate(p.gpu_layers) if n]
        if s.device == "cpu":
            lines.append(f"sched_reserve: {'CPU':>10s} compute buffer size = {s.compute_buffer_bytes / MIB:8.2f} MiB")
        lines.append(f"srv    load_model: initializing, n_slots = {s.n_parallel}, "
                     f"n_ctx_slot = {n_ctx // s.n_parallel}, kv_unified = 'false'")
        lines.append("srv    load_model: model loaded")
        self.write(t_s, lines)

    @staticmethod
    def _device_lines(s: Scenario, model: LoadedModel, gpu_name: str, free_bytes: list[int]) -> list[str]:
        """The device list a real build prints at start, then the devices the model load uses."""
        if s.device == "cpu":
            return []
        if s.device == "metal":
            ws = model.device_memory_bytes()
            return ["ggml_metal_device_init: tensor API disabled for pre-M5 and pre-A19 devices",
                    f"ggml_metal_device_init: GPU name:   MTL0 ({gpu_name})",
                    "ggml_metal_device_init: has unified memory    = true",
                    f"ggml_metal_device_init: recommendedMaxWorkingSetSize  = {ws / 1e6:8.2f} MB",
                    f"llama_model_load_from_file_impl: using device MTL0 ({gpu_name}) (unknown id) - "
                    f"{free_bytes[0] // MIB} MiB free"]
        total = model.gpu.vram_bytes
        lines = [f"ggml_cuda_init: found {s.n_gpus} CUDA devices (Total VRAM: {s.n_gpus * total // MIB} MiB):"]
        lines += [f"  Device {i}: NVIDIA GeForce {gpu_name}, compute capability 8.6, VMM: yes, VRAM: "
                  f"{total // MIB} MiB" for i in range(s.n_gpus)]
        lines += [f"llama_model_load_from_file_impl: using device CUDA{i} (NVIDIA GeForce {gpu_name}) "
                  f"(0000:{i + 1:02x}:00.0) - {free // MIB} MiB free" for i, free in enumerate(free_bytes)]
        return lines


def request_end_lines(id_task: int, slot: int, prompt_n: int, prompt_s: float, predicted_n: int,
                      predicted_s: float, n_tokens: int) -> list[str]:
    """What llama-server prints at default verbosity when a request ends (``print_timing``, ``release``)."""
    head = f"slot print_timing: id {slot:2d} | task {id_task} |"

    def per(n: int, secs: float) -> str:
        ms = secs * 1000.0
        return (f"{ms:10.2f} ms / {n:5d} tokens ({ms / n if n else 0.0:8.2f} ms per token, "
                f"{n / secs if secs > 0 else 0.0:8.2f} tokens per second)")

    return [
        f"{head} prompt eval time = {per(prompt_n, prompt_s)}",
        f"{head}        eval time = {per(predicted_n, predicted_s)}",
        f"{head}       total time = {(prompt_s + predicted_s) * 1000.0:10.2f} ms / {prompt_n + predicted_n:5d} tokens",
        f"slot      release: id {slot:2d} | task {id_task} | stop processing: n_tokens = {n_tokens}, truncated = 0",
    ]


def remove_sim_dir(path: str) -> None:
    """Remove the simulator's folder (its own temporary folder, with the model folders it wrote); nothing happens if
    it is already gone."""
    import shutil

    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
