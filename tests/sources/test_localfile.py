"""Files kvmon reads for metadata (a GGUF header, a server's log): regular files only, opened without ever waiting,
and never more than the asked-for bytes read."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from kvmon.sources.localfile import NotARegularFile, read_from, read_tail


def test_a_fifo_in_place_of_a_log_is_refused_at_once_and_never_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "server.log"
    os.mkfifo(fifo)
    outcome: list[BaseException | bytes] = []

    def read() -> None:
        try:
            outcome.append(read_tail(fifo, 4096))
        except BaseException as e:
            outcome.append(e)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(5)
    if reader.is_alive():  # nobody ever writes to the FIFO: free the reader before failing
        with open(fifo, "wb"):
            pass
        pytest.fail("reading a FIFO waited for a writer")
    assert isinstance(outcome[0], NotARegularFile)
    assert "not a regular file (a FIFO)" in str(outcome[0])


def test_a_folder_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(NotARegularFile, match=r"a folder"):
        read_from(tmp_path, 0, 100)


def test_the_tail_is_the_last_bytes_and_never_more(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    content = b"".join(f"line {i}\n".encode() for i in range(1000))
    log.write_bytes(content)
    assert read_tail(log, 20) == b"7\nline 998\nline 999\n"
    assert read_tail(log, 10**9) == content


def test_reading_from_an_offset_gives_the_bytes_there_and_the_size(tmp_path: Path) -> None:
    f = tmp_path / "model.gguf"
    f.write_bytes(bytes(range(256)))
    assert read_from(f, 250, 100) == (bytes(range(250, 256)), 256)
    assert read_from(f, 10_000, 100) == (b"", 256)  # a file that shrank since its size was read
