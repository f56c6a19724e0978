"""The weights of a safetensors checkpoint from its headers alone: each file's 8-byte header length and JSON header
(tensor names, dtypes, shapes, byte offsets), never its data.

The format (huggingface/safetensors ``docs``/``README``): a little-endian u64 N, then N bytes of UTF-8 JSON mapping
each tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (plus an optional ``__metadata__`` of
strings), then the data. The sum over the tensors of elements × dtype size is the checkpoint's weight bytes; a
tensor whose offsets disagree with its shape and dtype, an unknown dtype or a header past ``MAX_HEADER_BYTES`` makes
the file's sum unknown, with the reason. Files are opened as regular files only (``kvmon.sources.localfile``).
"""

from __future__ import annotations

import glob
import math
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from kvmon.core.jsonvals import InputError, parse_json
from kvmon.sources.localfile import read_from

MAX_HEADER_BYTES = 100 * 1024 * 1024  # the format's own limit on a header
MAX_FILES = 512  # shards of one checkpoint (the largest published ones have a few hundred)
# bytes per element of each dtype the format names (``safetensors/src/tensor.rs`` ``Dtype``)
DTYPE_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16,
              "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "F64": 64, "I64": 64, "U64": 64,
              "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}


@dataclass(frozen=True)
class SafetensorsWeights:
    """What a folder's safetensors headers say: total bytes, how many files and tensors, the dtypes, or why not."""

    weight_bytes: int | None
    n_files: int
    n_tensors: int
    dtypes: tuple[str, ...]
    why_not: str | None = None


def header_tensor_bytes(path: str) -> tuple[int, int, set[str]]:
    """(bytes, tensors, dtypes) of one safetensors file from its header; ValueError (why) or OSError when not."""
    head, size = read_from(path, 0, 8)
    name = os.path.basename(path)
    if len(head) < 8:
        raise ValueError(f"{name} is {size} bytes: no safetensors header")
    (n,) = struct.unpack("<Q", head)
    if n > MAX_HEADER_BYTES or 8 + n > size:
        raise ValueError(f"{name}'s header length ({n:,} bytes) does not fit the file ({size:,} bytes)")
    raw, _ = read_from(path, 8, n)
    try:
        doc = parse_json(raw)
    except InputError as e:
        raise ValueError(f"{name}'s header is not JSON: {e}") from None
    if not isinstance(doc, Mapping):
        raise ValueError(f"{name}'s header is not a JSON object")
    total = count = 0
    dtypes: set[str] = set()
    for key, t in doc.items():
        if key == "__metadata__":
            continue
        if not isinstance(t, Mapping) or not isinstance(t.get("shape"), list) or not isinstance(t.get("dtype"), str):
            raise ValueError(f"{name}: tensor {key!r} has no dtype and shape")
        bits = DTYPE_BITS.get(t["dtype"])
        if bits is None:
            raise ValueError(f"{name}: tensor {key!r} has dtype {t['dtype']!r}, which kvmon cannot size")
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in t["shape"]):
            raise ValueError(f"{name}: tensor {key!r} has a bad shape")
        nbytes = (math.prod(t["shape"]) * bits + 7) // 8
        offs = t.get("data_offsets")
        if (not isinstance(offs, list) or len(offs) != 2 or not all(isinstance(o, int) for o in offs)
                or offs[1] - offs[0] != nbytes or offs[1] > size - 8 - n):
            raise ValueError(f"{name}: tensor {key!r}'s offsets disagree with its shape and dtype")
        total += nbytes
        count += 1
        dtypes.add(t["dtype"])
    return total, count, dtypes


def folder_weights(folder: str) -> SafetensorsWeights:
    """The weights of every ``*.safetensors`` file in ``folder`` (a checkpoint's shards), read from the headers."""
    paths = sorted(glob.glob(os.path.join(glob.escape(folder), "*.safetensors")))
    if not paths:
        return SafetensorsWeights(None, 0, 0, (), "no .safetensors files in the model folder")
    if len(paths) > MAX_FILES:
        return SafetensorsWeights(None, len(paths), 0, (), f"{len(paths)} .safetensors files: more than a checkpoint")
    total = count = 0
    dtypes: set[str] = set()
    for p in paths:
        try:
            b, c, d = header_tensor_bytes(p)
        except (OSError, ValueError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            return SafetensorsWeights(None, len(paths), 0, (), f"safetensors header unreadable: {why}")
        total, count = total + b, count + c
        dtypes |= d
    if count == 0:
        return SafetensorsWeights(None, len(paths), 0, (), "the safetensors headers list no tensors")
    return SafetensorsWeights(total, len(paths), count, tuple(sorted(dtypes)))
