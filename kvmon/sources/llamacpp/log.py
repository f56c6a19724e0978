"""Parse llama.cpp / llama-server log lines into ``ServerConfig`` fields (KV size and types, layers, buffers).

The log is the only place that states what the server actually allocated: the KV cache size line (in its
three historical spellings), offloaded layers, model / KV / compute buffer sizes per device, n_ctx,
n_seq, flash attention, unified KV, and the compute devices it found (``kvmon.sources.llamacpp.devices``). Lines
may carry any prefix (timestamps, Ollama's ``msg=`` wrapper); a new load block (server restart) starts the facts
afresh. Since May 2026 (build 9151) llama-server prints none of the placement lines unless started with ``-lv 4``
or ``-v``: ``placement_hint`` says so when a log lacks them.

A log is outside input: a line longer than ``MAX_LINE_CHARS`` or with a number no type holds is skipped, never
fatal, and a log file is read through ``kvmon.sources.localfile`` (regular files only, never blocking, a bounded
read per poll).
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO, Any

from kvmon.core.bounds import MAX_BYTES, MAX_CONTEXT_TOKENS
from kvmon.core.jsonvals import text_float, text_int
from kvmon.core.readings import Provenance, ServerConfig
from kvmon.core.sanitize import plain_text
from kvmon.core.units import MIB
from kvmon.sources.llamacpp.devices import DeviceLines
from kvmon.sources.localfile import read_from

MAX_LINE_CHARS = 64 * 1024  # llama.cpp's longest lines (the chat template) are a few KB
_NUM = r"([0-9]+(?:\.[0-9]+)?)"

# a new server start / model load: forget what the previous one said
_RESTART = re.compile(
    r"(llama_server: initializing|main: build = |common_params_print_info: build |srv +load_model: loading model)"
)
# llama_kv_cache: size = 32.00 MiB ( 16384 cells, 4 layers, 1/1 seqs), K (f16): 16.00 MiB, V (f16): 16.00 MiB
# llama_kv_cache_unified: size = ... (same shape, mid-late 2025)
_KV_SIZE = re.compile(
    r"llama_kv_cache(?:_unified)?: +size = +" + _NUM + r" MiB \( *([0-9]+) cells, +([0-9]+) layers,"
    r"(?: +([0-9]+)(?:/ *([0-9]+))? seqs)?\)(?:, K \((\w+)\): +" + _NUM + r" MiB, V \((\w+)\): +" + _NUM + " MiB)?"
)
# until early 2025: llama_new_context_with_model: KV self size  =  X MiB, K (f16): X MiB, V (f16): X MiB
_KV_SELF = re.compile(
    r"KV self size += +" + _NUM + r" MiB(?:, K \((\w+)\): +" + _NUM + r" MiB, V \((\w+)\): +" + _NUM + " MiB)?"
)
# llama_memory_recurrent: size =    0.22 MiB (     4 cells,   4 layers,  4 seqs  0 rs_seq), R (f32): ..., S (f32): ...
_RS_SIZE = re.compile(r"llama_memory_recurrent: +size = +" + _NUM + " MiB")
# "init:" is the spring-2025 prefix (llama_kv_cache_unified::init), "llama_kv_cache_init:" the 2024 one
_KV_BUF = re.compile(r"(?:llama_kv_cache\w*|init): +(\S+) KV buffer size = +" + _NUM + " MiB")
# "model buffer size" since late 2024; 2024 builds printed "llm_load_tensors:        CPU buffer size = …"
_MODEL_BUF = re.compile(r"(?:load_tensors|llm_load_tensors): +(\S+) (?:model )?buffer size = +" + _NUM + " MiB")
_COMPUTE_BUF = re.compile(r": +(\S+) compute buffer size = +" + _NUM + " MiB")
_OFFLOADED = re.compile(r"offloaded ([0-9]+)/([0-9]+) layers to GPU")
_CTX_FIELD = re.compile(
    r"(?:llama_context|llama_new_context_with_model): +(n_ctx|n_ctx_seq|n_ctx_per_seq|n_batch|n_ubatch|n_seq_max|"
    r"flash_attn|kv_unified) += +([A-Za-z0-9_]+)"
)
_SLOTS = re.compile(r"initializing, n_slots = ([0-9]+), n_ctx_slot = ([0-9]+)(?:, kv_unified = '(\w+)')?")
_AUTO_PAR = re.compile(r"n_parallel is set to auto, using n_parallel = ([0-9]+) and kv_unified = (\w+)")
_MODEL_FILE = re.compile(r"llama_model_loader: loaded meta data with \d+ key-value pairs and \d+ tensors from "
                         r"(.+?)(?: \(version .*)?$")
# the draft context of speculative decoding: a draft model's (its weights, KV and compute buffers follow) or the MTP
# layers' context against the target model (its KV follows); its lines describe the draft, not the model
_DRAFT_START = re.compile(r"loading draft model|creating MTP draft context")
_DRAFT_END = re.compile(r"speculative decoding context initialized")
_LOADED = re.compile(r"(llama_server: model loaded|main: model loaded|server is listening|"
                     r"load_model: initializing, n_slots)")
# llama_kv_cache_iswa: using full-size SWA cache (ref: ...); creating     SWA KV cache, size = 768 cells
_SWA_FULL = re.compile(r"llama_kv_cache_iswa: using full-size SWA cache")
_SWA_CACHE = re.compile(r"llama_kv_cache_iswa: creating +SWA KV cache, size = ([0-9]+) cells")
_FA_ON = re.compile(r"(Flash Attention enabled|enabling flash_attn since)")
_FA_OFF = re.compile(r"Flash Attention was auto, set to disabled|flash_attn is not compatible")
# load_model: prompt cache is enabled, size limit: 8192 MiB | ... size limit: no limit | prompt cache is disabled
_CACHE_RAM = re.compile(r"prompt cache is (?:enabled, size limit: (?:([0-9]+) MiB|(no limit))|(disabled))")


# llama_context's count lines -> the parser's field
_CTX_COUNTS = {"n_ctx": "n_ctx_total", "n_ctx_seq": "n_ctx_seq", "n_ctx_per_seq": "n_ctx_seq", "n_ubatch": "n_ubatch",
               "n_batch": "n_batch", "n_seq_max": "n_parallel"}
# the parser's fields that are ServerConfig fields of the same name
_CONFIG_FIELDS = ("n_ctx_total", "n_parallel", "kv_unified", "type_k", "type_v", "flash_attn", "n_ubatch", "n_batch",
                  "swa_full", "offloaded_layers", "total_layers", "kv_bytes_allocated", "recurrent_bytes_allocated",
                  "model_path", "prompt_cache_limit_bytes", "draft_kv_bytes_allocated", "draft_type_k",
                  "draft_type_v")


class LogValueError(ValueError):
    """A log line whose number is not a size, count or length any machine has."""


def _mib(text: str) -> int:
    mib = text_float(text, limit=MAX_BYTES / MIB)
    if mib is None:
        raise LogValueError(f"{text[:20]!r} MiB is not a size")
    return round(mib * MIB)


def _int(text: str, limit: int = MAX_CONTEXT_TOKENS) -> int:
    n = text_int(text, limit=limit)
    if n is None:
        raise LogValueError(f"{text[:20]!r} is not a count")
    return n


def _bool(text: str) -> bool | None:
    t = text.strip("'\"").lower()
    if t in ("true", "1", "enabled", "on"):
        return True
    if t in ("false", "0", "disabled", "off"):
        return False
    return None


@dataclass
class LlamaLogParser:
    """Feed log lines in order; ``config()`` gives what the latest load block said (provenance ``log``)."""

    n_ctx_total: int | None = None
    n_ctx_seq: int | None = None
    n_parallel: int | None = None
    kv_unified: bool | None = None
    type_k: str | None = None
    type_v: str | None = None
    flash_attn: str | None = None
    n_ubatch: int | None = None
    n_batch: int | None = None
    swa_full: bool | None = None  # said only by models with sliding-window layers
    offloaded_layers: int | None = None
    total_layers: int | None = None
    kv_bytes_allocated: int | None = None
    recurrent_bytes_allocated: int | None = None
    kv_cells: int | None = None
    model_buffers: dict[str, int] = field(default_factory=dict)
    kv_buffers: dict[str, int] = field(default_factory=dict)
    compute_buffers: dict[str, int] = field(default_factory=dict)
    device_lines: DeviceLines = field(default_factory=DeviceLines)
    model_path: str | None = None  # the GGUF this load block read (llama_model_loader)
    loaded: bool = False  # the server said it finished loading
    prompt_cache_limit_bytes: int | None = None  # -1 no limit, 0 off
    draft_kv_bytes_allocated: int | None = None  # the draft context's KV size line(s)
    draft_type_k: str | None = None
    draft_type_v: str | None = None
    draft_model_buffers: dict[str, int] = field(default_factory=dict)
    draft_kv_buffers: dict[str, int] = field(default_factory=dict)
    draft_compute_buffers: dict[str, int] = field(default_factory=dict)
    in_draft: bool = False  # between the draft context's first line and the end of the load
    _kv_sizes_in_block: int = 0
    _draft_kv_sizes: int = 0

    def reset(self) -> None:
        """Forget everything: a new server start began in the log."""
        fresh = LlamaLogParser()
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(fresh, name))

    def feed(self, line: str) -> None:
        """Take one log line; lines that say nothing kvmon needs are ignored, unreadable ones skipped."""
        if len(line) > MAX_LINE_CHARS:
            return
        with contextlib.suppress(ValueError):  # LogValueError, or digits past what int() reads
            self._feed(plain_text(line.replace("\t", " ")))  # what it names (a device, a model) may be shown

    def _feed(self, line: str) -> None:
        if _RESTART.search(line):
            if self._seen_anything():
                self.reset()
            return
        self.device_lines.feed(line)
        if _LOADED.search(line):
            self.loaded = True
            self.in_draft = False
        if _DRAFT_START.search(line):
            self.in_draft = True
            return
        if self.in_draft:
            self._feed_draft(line)
            return
        m = _MODEL_FILE.search(line)
        if m:
            self.model_path = m.group(1).strip()
            return
        m = _KV_SIZE.search(line)
        if m:
            size = _mib(m.group(1))
            # SWA models print two size lines (non-SWA and SWA caches): they add up
            self.kv_bytes_allocated = (self.kv_bytes_allocated or 0) + size if self._kv_sizes_in_block else size
            self._kv_sizes_in_block += 1
            cells = _int(m.group(2))
            self.kv_cells = max(self.kv_cells or 0, cells)
            if m.group(6):
                self.type_k, self.type_v = m.group(6).lower(), m.group(8).lower()
            return
        m = _RS_SIZE.search(line)
        if m:
            self.recurrent_bytes_allocated = _mib(m.group(1))
            return
        m = _KV_SELF.search(line)
        if m:
            self.kv_bytes_allocated = _mib(m.group(1))
            if m.group(2):
                self.type_k, self.type_v = m.group(2).lower(), m.group(4).lower()
            return
        if self._buffer(line, self.kv_buffers, self.model_buffers, self.compute_buffers):
            return
        m = _OFFLOADED.search(line)
        if m:
            self.offloaded_layers, self.total_layers = _int(m.group(1)), _int(m.group(2))
            return
        m = _CTX_FIELD.search(line)
        if m:
            self._ctx_field(m.group(1), m.group(2))
            return
        m = _SLOTS.search(line)
        if m:
            n_parallel, n_ctx_seq = _int(m.group(1)), _int(m.group(2))
            self.n_parallel = n_parallel
            if m.group(3) is not None:
                self.kv_unified = _bool(m.group(3))
            if self.n_ctx_seq is None:
                self.n_ctx_seq = n_ctx_seq
            return
        m = _AUTO_PAR.search(line)
        if m:
            self.n_parallel, self.kv_unified = _int(m.group(1)), _bool(m.group(2))
            return
        if _SWA_FULL.search(line):
            self.swa_full = True
            return
        if _SWA_CACHE.search(line):
            if self.swa_full is None:
                self.swa_full = False
            return
        m = _CACHE_RAM.search(line)
        if m:
            self.prompt_cache_limit_bytes = int(m.group(1)) * MIB if m.group(1) else -1 if m.group(2) else 0
            return
        if _FA_ON.search(line):
            self.flash_attn = "on"
        elif _FA_OFF.search(line):
            self.flash_attn = "off"

    def _feed_draft(self, line: str) -> None:
        """A line of the draft context's load: its KV size and types, its weights', KV and compute buffers; its
        context fields repeat the model's and its model file is the draft's, so neither changes the model's."""
        if _DRAFT_END.search(line):
            self.in_draft = False
            return
        m = _KV_SIZE.search(line)
        if m:
            size = _mib(m.group(1))
            # a sliding-window draft prints two size lines: they add up
            self.draft_kv_bytes_allocated = (self.draft_kv_bytes_allocated or 0) + size if self._draft_kv_sizes \
                else size
            self._draft_kv_sizes += 1
            if m.group(6):
                self.draft_type_k, self.draft_type_v = m.group(6).lower(), m.group(8).lower()
            return
        self._buffer(line, self.draft_kv_buffers, self.draft_model_buffers, self.draft_compute_buffers)

    def _buffer(self, line: str, kv: dict[str, int], weights: dict[str, int], compute: dict[str, int]) -> bool:
        """A KV, weights or compute buffer line (the model's or the draft's context's, by the maps given): KV and
        weights buffers of a device add up, a compute buffer is its size; True when the line was one."""
        for rx, target in ((_KV_BUF, kv), (_MODEL_BUF, weights)):
            m = rx.search(line)
            if m:
                target[m.group(1)] = target.get(m.group(1), 0) + _mib(m.group(2))
                return True
        m = _COMPUTE_BUF.search(line)
        if m:
            compute[m.group(1)] = _mib(m.group(2))
            return True
        return False

    def _ctx_field(self, name: str, value: str) -> None:
        num = text_int(value, limit=MAX_CONTEXT_TOKENS)
        if name in _CTX_COUNTS:
            if num is not None:
                setattr(self, _CTX_COUNTS[name], num)
        elif name == "flash_attn":
            v = value.lower()
            if v in ("auto",):
                if self.flash_attn is None:
                    self.flash_attn = "auto"
            else:
                b = _bool(v)
                if b is not None:
                    self.flash_attn = "on" if b else "off"
        elif name == "kv_unified":
            self.kv_unified = _bool(value)

    def _seen_anything(self) -> bool:
        """Whether a load already reported its results (so a start marker now means a new run).

        Settings printed before the model loads (``n_parallel is set to auto``) do not count: the
        ``loading model`` line that follows them must not wipe them.
        """
        return bool(
            self.loaded
            or self.kv_bytes_allocated is not None
            or self.recurrent_bytes_allocated is not None
            or self.n_ctx_total is not None
            or self.model_buffers
            or self.kv_buffers
            or self.offloaded_layers is not None
        )

    def config(self) -> ServerConfig:
        """The facts so far as a ``ServerConfig`` whose provenance says ``log`` for every field set."""
        values = {name: getattr(self, name) for name in _CONFIG_FIELDS}
        prov = {k: Provenance.LOG for k, v in values.items() if v is not None}
        compute = dict(self.compute_buffers)  # the server's compute memory: the model's and the draft context's
        for dev, nbytes in self.draft_compute_buffers.items():
            compute[dev] = compute.get(dev, 0) + nbytes
        maps = {
            "model_buffer_bytes_by_device": dict(self.model_buffers),
            "kv_buffer_bytes_by_device": dict(self.kv_buffers),
            "compute_buffer_bytes_by_device": compute,
            "device_free_bytes_by_device": dict(self.device_lines.using_free_bytes),
            "draft_model_buffer_bytes_by_device": dict(self.draft_model_buffers),
            "draft_kv_buffer_bytes_by_device": dict(self.draft_kv_buffers),
        }
        prov.update({k: Provenance.LOG for k, v in maps.items() if v})
        devices = self.device_lines.devices()
        if devices:
            prov["devices"] = Provenance.LOG
        return ServerConfig(**values, **maps, devices=devices, provenance=prov)  # type: ignore[arg-type]  # by name

    def placement_hint(self) -> str | None:
        """Why this log cannot say where the model lives, when it cannot (None when it can, or cannot tell yet)."""
        if self.model_buffers or self.kv_buffers or self.kv_bytes_allocated is not None:
            return None
        v = self.device_lines.verbosity
        if v is not None and v < 4:
            return (f"llama-server logs at verbosity {v}: its load_tensors and llama_kv_cache lines (where the model "
                    "and KV cache live) are hidden; start it with -lv 4 and give kvmon that log")
        if self.loaded:
            return ("the log has no load_tensors or llama_kv_cache lines (where the model and KV cache live): "
                    "llama-server builds since May 2026 print them only with -lv 4 or -v; give kvmon the log from "
                    "the server's start")
        return None


def parse_llama_log(lines: Iterable[str]) -> ServerConfig:
    """Parse a whole log (an iterable of lines) and return what its latest load block said."""
    parser = LlamaLogParser()
    for line in lines:
        parser.feed(line)
    return parser.config()


class LogFollower:
    """Follow a log file across polls: read only what was appended; start over when it is truncated.

    The path ``-`` means standard input (``llama-server ... 2>&1 | kvmon --log -``): a daemon thread
    reads it line by line as the server writes; undecodable bytes are replaced, a line past
    ``MAX_LINE_CHARS`` is skipped, and only a closed or failing stream ends the thread (``error`` says why).
    """

    MAX_READ_BYTES = 16 * MIB  # per poll, so a huge log never stalls a poll

    def __init__(self, path: str, stream: IO[str] | IO[bytes] | None = None) -> None:
        self.path = path
        self.parser = LlamaLogParser()
        self._offset = 0
        self._partial = ""
        self._skipping = False  # inside a line longer than MAX_LINE_CHARS: dropped up to its newline
        self.error: str | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        if path == "-" or stream is not None:
            self._thread = threading.Thread(target=self._read_stream, args=(stream or sys.stdin,), daemon=True,
                                            name="kvmon-log-stdin")
            self._thread.start()

    def _read_stream(self, stream: IO[str] | IO[bytes]) -> None:
        raw = getattr(stream, "buffer", None)  # the bytes under a text stream: decoded here, bad bytes replaced
        source: IO[Any] = raw if raw is not None else stream
        skipping = False
        try:
            while True:
                piece = source.readline(MAX_LINE_CHARS + 1)
                if not piece:
                    return
                text = piece.decode("utf-8", "replace") if isinstance(piece, bytes) else piece
                ended = text.endswith("\n")
                if skipping or (not ended and len(text) > MAX_LINE_CHARS):
                    skipping = not ended
                    continue
                with self._lock:
                    self.parser.feed(text.rstrip("\r\n"))
        except (OSError, ValueError) as e:  # the stream was closed or failed
            self.error = f"cannot read the piped log: {e}"

    def placement_hint(self) -> str | None:
        """The parser's ``placement_hint`` for what was read so far."""
        with self._lock:
            return self.parser.placement_hint()

    def poll(self) -> ServerConfig:
        """Read new lines (if any) and return the current facts; an unreadable file sets ``error``."""
        if self._thread is not None:
            with self._lock:
                return self.parser.config()
        try:
            data, size = read_from(self.path, self._offset, self.MAX_READ_BYTES)
            if size < self._offset:  # truncated or replaced: a new run
                self._offset, self._partial, self._skipping = 0, "", False
                self.parser = LlamaLogParser()
                data, size = read_from(self.path, 0, self.MAX_READ_BYTES)
            if data:
                self._offset += len(data)
                lines = (self._partial + data.decode("utf-8", errors="replace")).split("\n")
                self._partial = lines.pop()
                if self._skipping and lines:  # the rest of an overlong line, up to its newline
                    lines.pop(0)
                    self._skipping = False
                for line in lines:
                    self.parser.feed(line.rstrip("\r"))
                if len(self._partial) > MAX_LINE_CHARS:  # no newline in sight: drop it, and the rest of it
                    self._partial, self._skipping = "", True
            self.error = None
        except OSError as e:
            self.error = f"cannot read log file: {e.strerror or type(e).__name__}"
        return self.parser.config()
