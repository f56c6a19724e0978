"""Read a GGUF file's metadata header (not its tensors) fast enough to call on a 40 GB model.

Only the key/value section and the tensor directory are walked; big tokenizer arrays are skipped
without being decoded; tensor data is never touched. Value types and the magic come from the ``gguf``
package. The result is a plain dict keyed exactly as GGUF names them ("llama.block_count", ...).

The file may be hostile: it is opened through ``kvmon.sources.localfile`` (regular files only, never blocking),
only its first ``MAX_HEADER_BYTES`` are parsed, arrays nest at most ``MAX_ARRAY_DEPTH`` levels and at most
``MAX_VALUES`` keys and elements are decoded; past any bound the header is a ``GgufError``, the one error the
reader raises for a bad file.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gguf import GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUFValueType
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from kvmon.core.sanitize import plain_text
from kvmon.sources.localfile import open_regular

MAX_KEPT_ARRAY = 4096  # per-layer arrays are kept; tokenizer vocabularies (tens of thousands) are skipped
MAX_HEADER_BYTES = 512 * 1024 * 1024  # the biggest tokenizers take tens of MB; no header needs more than this
MAX_ARRAY_DEPTH = 4  # GGUF files have flat arrays; gguf-py allows nesting, a deeper one is no model's
MAX_VALUES = 2_000_000  # keys plus elements decoded one by one (numeric arrays are read whole)

_SCALAR = {
    GGUFValueType.UINT8: "B",
    GGUFValueType.INT8: "b",
    GGUFValueType.UINT16: "H",
    GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I",
    GGUFValueType.INT32: "i",
    GGUFValueType.FLOAT32: "f",
    GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q",
    GGUFValueType.INT64: "q",
    GGUFValueType.FLOAT64: "d",
}


class GgufError(ValueError):
    """The file is not a readable GGUF (wrong magic, truncated, unknown value type)."""


@dataclass(frozen=True)
class GgufHeader:
    """Metadata plus what the tensor directory says about size."""

    metadata: dict[str, Any]
    version: int
    tensor_count: int
    file_size_bytes: int
    data_offset_bytes: int | None  # where tensor data starts
    tensor_bytes: int | None  # sum of tensor sizes (the weights); None when the directory lists none or an unknown type
    skipped_keys: tuple[str, ...] = field(default=())  # arrays too long to keep (tokenizer vocabularies)
    # (name, bytes) of every tensor in the directory's order; empty when a size is unknown (an unknown type)
    tensor_sizes: tuple[tuple[str, int], ...] = field(default=(), repr=False)


class _Cursor:
    def __init__(self, buf: Any, endian: str) -> None:
        self.buf = buf
        self.pos = 0
        self.e = endian
        self.size = min(len(buf), MAX_HEADER_BYTES)
        self.values = 0

    def count(self, n: int) -> None:
        """Spend ``n`` of the header's budget of values decoded one by one."""
        self.values += n
        if self.values > MAX_VALUES:
            raise GgufError(f"GGUF header holds more than {MAX_VALUES:,} values")

    def need(self, n: int) -> None:
        if n < 0 or self.pos + n > self.size:
            raise GgufError(f"GGUF header truncated at byte {self.pos}")

    def unpack(self, fmt: str) -> Any:
        s = struct.Struct(self.e + fmt)
        self.need(s.size)
        (v,) = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return v

    def string(self, len_fmt: str) -> str:
        n = self.unpack(len_fmt)
        self.need(n)
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return raw.decode("utf-8", errors="replace")

def _value(cur: _Cursor, vtype: int, len_fmt: str, key: str, skipped: list[str], depth: int = 0) -> Any:
    try:
        t = GGUFValueType(vtype)
    except ValueError:
        raise GgufError(f"unknown GGUF value type {vtype} for key {key!r}") from None
    if t in _SCALAR:
        return cur.unpack(_SCALAR[t])
    if t == GGUFValueType.STRING:
        return plain_text(cur.string(len_fmt))  # a name kvmon may show (general.name): plain text
    # array
    etype = cur.unpack("I")
    count = cur.unpack(len_fmt)
    try:
        et = GGUFValueType(etype)
    except ValueError:
        raise GgufError(f"unknown GGUF array element type {etype} for key {key!r}") from None
    if et in _SCALAR:
        width = struct.calcsize(_SCALAR[et])
        cur.need(count * width)
        if count > MAX_KEPT_ARRAY:
            cur.pos += count * width
            skipped.append(key)
            return None
        arr = np.frombuffer(cur.buf[cur.pos : cur.pos + count * width], dtype=np.dtype(cur.e + _SCALAR[et]))
        cur.pos += count * width
        return [bool(x) for x in arr] if et == GGUFValueType.BOOL else arr.tolist()
    if et == GGUFValueType.STRING:
        if count > MAX_KEPT_ARRAY:
            cur.pos = _skip_strings(cur, count, len_fmt)
            skipped.append(key)
            return None
        cur.count(count)
        return [plain_text(cur.string(len_fmt)) for _ in range(count)]
    if count > MAX_KEPT_ARRAY:
        raise GgufError(f"nested GGUF array too long for key {key!r}")
    if depth + 1 >= MAX_ARRAY_DEPTH:
        raise GgufError(f"GGUF array for key {key!r} nested deeper than {MAX_ARRAY_DEPTH} levels")
    cur.count(count)
    return [_value(cur, et, len_fmt, key, skipped, depth + 1) for _ in range(count)]


def _skip_strings(cur: _Cursor, count: int, len_fmt: str) -> int:
    """Position after ``count`` length-prefixed strings, read without decoding them (tight loop)."""
    unpack = struct.Struct(cur.e + len_fmt).unpack_from
    width = struct.calcsize(len_fmt)
    buf, pos, end = cur.buf, cur.pos, cur.size - width
    for _ in range(count):
        if pos > end:
            raise GgufError(f"GGUF header truncated at byte {pos}")
        pos += width + unpack(buf, pos)[0]
    if pos > cur.size:
        raise GgufError(f"GGUF header truncated at byte {cur.size}")
    return pos


def _tensor_bytes(ggml_type: int, dims: list[int]) -> int | None:
    try:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        return None
    return (math.prod(dims) // block) * size


def read_gguf_header(path: str | os.PathLike[str]) -> GgufHeader:
    """Parse the header of the GGUF at ``path``; raises GgufError (bad file) or OSError (cannot open, or not a
    regular file: ``kvmon.sources.localfile.NotARegularFile``)."""
    with open_regular(path) as f:
        file_size = os.fstat(f.fileno()).st_size
        if file_size < 24:
            raise GgufError(f"not a GGUF file ({file_size} bytes)")
        # Map the file: only the header pages are ever touched. The parser takes copies (slices) of
        # what it keeps, so no view of the map outlives this block, even when parsing fails.
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return _parse(mm, file_size)


def _parse(buf: Any, file_size: int) -> GgufHeader:
    try:
        magic = struct.unpack_from("<I", buf, 0)[0]
        if magic != GGUF_MAGIC:
            raise GgufError("not a GGUF file (bad magic)")
        version = struct.unpack_from("<I", buf, 4)[0]
        endian = "<"
        if version & 0xFFFF == 0 and version != 0:  # big-endian file
            endian = ">"
            version = struct.unpack_from(">I", buf, 4)[0]
        if version not in (1, 2, 3):
            raise GgufError(f"unsupported GGUF version {version}")
        len_fmt = "I" if version == 1 else "Q"
        cur = _Cursor(buf, endian)
        cur.pos = 8
        tensor_count = cur.unpack(len_fmt)
        kv_count = cur.unpack(len_fmt)
        if kv_count > 1_000_000 or tensor_count > 10_000_000:
            raise GgufError("implausible GGUF header counts")
        meta: dict[str, Any] = {}
        skipped: list[str] = []
        for _ in range(kv_count):
            cur.count(1)
            key = cur.string(len_fmt)
            vtype = cur.unpack("I")
            meta[key] = _value(cur, vtype, len_fmt, key, skipped)
        for k in skipped:
            meta.pop(k, None)
        # tensor directory: name, dims, type, offset
        total: int | None = 0
        sizes: list[tuple[str, int]] | None = []
        try:
            for _ in range(tensor_count):
                cur.count(1)
                name = cur.string(len_fmt)
                n_dims = cur.unpack("I")
                if n_dims > 8:
                    raise GgufError("implausible tensor rank")
                dims = [cur.unpack(len_fmt) for _ in range(n_dims)]
                ttype = cur.unpack("I")
                cur.unpack("Q")
                size = _tensor_bytes(ttype, dims)
                total = None if size is None or total is None else total + size
                if size is None:
                    sizes = None
                elif sizes is not None:
                    sizes.append((name, size))
            align = meta.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
            align = align if isinstance(align, int) and align > 0 else GGUF_DEFAULT_ALIGNMENT
            data_offset: int | None = -(-cur.pos // align) * align
        except GgufError:
            total, data_offset, sizes = None, None, None
        if tensor_count == 0:  # a header with no tensors (metadata only) says nothing of the weights: not 0 bytes
            total = None
        return GgufHeader(meta, version, tensor_count, file_size, data_offset, total, tuple(skipped),
                          tuple(sizes or ()))
    except struct.error as e:
        raise GgufError(f"GGUF header unreadable: {e}") from None


def read_gguf_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The metadata key/values of the GGUF at ``path`` (tokenizer vocabularies left out)."""
    return read_gguf_header(path).metadata
