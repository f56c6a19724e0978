"""Opening a file kvmon reads for metadata (a model's GGUF header, a server's log): never blocking, regular files
only, and never more than a size limit read at once.

The path may come from a server's answer (``/props`` model_path), a process's command line, or the user. A FIFO,
a device or a socket at that path would block ``open()`` or a read for ever, or pour out endless bytes: here the
open does not wait (``O_NONBLOCK``), anything but a regular file is refused with ``NotARegularFile`` (an OSError,
so every reader's ``except OSError`` reports it), and ``read_tail`` / ``read_from`` stop at their limit.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


class NotARegularFile(OSError):
    """The path names a FIFO, a device, a socket or a folder: kvmon reads metadata from regular files only."""

    def __init__(self, path: str | os.PathLike[str], mode: int) -> None:
        kind = next((name for test, name in _KINDS if test(mode)), "not a plain file")
        super().__init__(errno.EINVAL, f"not a regular file ({kind})", os.fspath(path))


def regular_stat(path: str | os.PathLike[str]) -> os.stat_result:
    """``os.stat(path)``, refusing anything but a regular file (raises NotARegularFile or another OSError)."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotARegularFile(path, st.st_mode)
    return st


@contextmanager
def open_regular(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """The regular file at ``path`` opened for binary reading, without ever waiting in ``open()``."""
    fd = os.open(path, _OPEN_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFile(path, st.st_mode)
        if _OPEN_FLAGS & getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)  # a regular file's reads never wait: back to ordinary reads
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        yield f


def read_from(path: str | os.PathLike[str], offset: int, max_bytes: int) -> tuple[bytes, int]:
    """(at most ``max_bytes`` from ``offset`` on, the file's size) of the regular file at ``path``."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(min(offset, size))
        return f.read(max_bytes), size


def read_tail(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The last ``max_bytes`` (at most) of the regular file at ``path``."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(max(0, size - max_bytes))
        return f.read(max_bytes)
