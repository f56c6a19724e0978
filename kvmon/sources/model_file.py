"""Model files on this machine: the GGUF header of each (read once per version of the file) and the model shape
built from its metadata (built once per version, and per source's metadata overrides).

A source that knows when its server started passes that start along: the file is then statted once per start, not
per poll. A server reads its model when it starts; a file written anew in its place later is not what it serves.

Both server sources read the model file here when they can: llama-server's ``-m`` (its ``/props`` model_path),
Ollama's blob (its modelfile's ``FROM``), and only for a server on this machine (the path names a file there).
A file that cannot be read says why, naming only the file, not its folder; anything but a regular file is never
opened (``kvmon.sources.localfile``).
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Mapping
from typing import Any

from kvmon.sources.gguf_meta import GgufError, GgufHeader, read_gguf_header
from kvmon.sources.localfile import regular_stat


def _looks_like_path(name: str) -> bool:
    """A model file's path as llama-server says it without --alias ("/models/x.gguf", "models/x.gguf", "./x"), not
    an alias that merely holds a slash ("meta-llama/Llama-3.1-8B", "<b>x</b>")."""
    return ("\\" in name or name.startswith(("/", "./", "../", "~")) or (len(name) > 2 and name[1] == ":")
            or ("/" in name and name.lower().endswith(".gguf")))


def display_name(server_name: str | None, model_path: str | None, general_name: str | None = None) -> str | None:
    """What the dashboard, captions and recordings call the model: never a path.

    llama-server names a model by its ``--alias``, else by the ``-m`` path as given (often a full path); then the
    GGUF's ``general.name`` is the model's name, else the file name. An alias the user chose stays.
    """
    if server_name and server_name != model_path and not _looks_like_path(server_name):
        return server_name
    if general_name and general_name.strip():
        return general_name.strip()
    for p in (model_path, server_name):
        if p:
            base = p.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
            if base:
                return base
    return None


FileKey = tuple[str, int, int]  # path, size, modification time (ns): a new version of the file is a new key
MAX_FILES = 8
Header = tuple[GgufHeader | None, str | None, FileKey | None]


def shape_of(metadata: Mapping[str, Any]) -> tuple[Any, str | None]:
    """A ModelShape from GGUF-keyed metadata, or (None, why)."""
    from kvmon.physics.shape import ModelShape

    try:
        return ModelShape.from_gguf(metadata), None
    except (ValueError, TypeError, KeyError, ArithmeticError) as e:  # ShapeError is a ValueError
        return None, f"model shape not understood: {e}"


class ModelFiles:
    """Headers and shapes of the model files a source has looked at, keyed by file version."""

    def __init__(self, max_files: int = MAX_FILES) -> None:
        self.max_files = max_files
        self._headers: dict[FileKey, tuple[GgufHeader | None, str | None]] = {}
        self._shapes: dict[FileKey | None, tuple[Any, str | None]] = {}
        self._by_start: dict[tuple[str, Hashable], Header] = {}  # what each file was at a server's start

    def _keep(self, cache: dict[Any, Any], key: Any, value: Any) -> None:
        """``cache[key] = value``, the oldest entries dropped to keep at most ``max_files``."""
        while len(cache) >= self.max_files:
            cache.pop(next(iter(cache)))
        cache[key] = value

    def header(self, path: str, start: Hashable | None = None) -> Header:
        """(the file's GGUF header, why not, the file version's key); a file that cannot be statted has no key.

        ``start``: the start of the server that loaded it (None: unknown, the file is statted each time). A file
        that was read for this start is not statted again; one that could not be is tried again next time."""
        if start is not None:
            known = self._by_start.get((path, start))
            if known is not None:
                return known
        found = self._header(path)
        if start is not None and found[2] is not None:
            self._keep(self._by_start, (path, start), found)
        return found

    def _header(self, path: str) -> Header:
        name = os.path.basename(path)
        try:
            st = regular_stat(path)
        except OSError as e:
            return None, f"model file {name!r} not readable here ({e.strerror or 'error'})", None
        key = (path, st.st_size, int(st.st_mtime_ns))
        if key not in self._headers:
            try:
                found: tuple[GgufHeader | None, str | None] = (read_gguf_header(path), None)
            except (GgufError, OSError, ValueError) as e:
                found = (None, f"model file {name!r} not readable: its GGUF header is unreadable ({e})")
            self._keep(self._headers, key, found)
        header, why = self._headers[key]
        return header, why, key

    def shape(self, metadata: Mapping[str, Any], key: FileKey | None) -> tuple[Any, str | None]:
        """The shape of ``metadata``, built once per ``key`` (the file version it came from; None: no file)."""
        if key not in self._shapes:
            self._keep(self._shapes, key, shape_of(metadata))
        return self._shapes[key]
