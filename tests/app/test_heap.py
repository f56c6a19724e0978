"""Freed heap memory given back to the system where the C library can."""

from __future__ import annotations


def test_freed_heap_goes_back_to_the_system_where_the_c_library_can() -> None:
    """After a bulk load the window gives back what the dropped Snapshots held: freed blocks between ones still
    alive stay in the process (glibc does not trim them itself) until ``release_freed_memory``."""
    import sys

    import psutil

    from kvmon.app.heap import release_freed_memory

    if not sys.platform.startswith("linux"):
        assert release_freed_memory() is False
        return
    proc = psutil.Process()
    blobs = [bytearray(4096) for _ in range(40000)]  # ~160 MiB in blocks the C library hands out
    kept = blobs[::100]  # a few stay alive between the freed ones, as the history's columns do
    del blobs
    before = proc.memory_info().rss
    assert release_freed_memory() is True
    after = proc.memory_info().rss
    assert before - after > 64 * 2**20, (before >> 20, after >> 20)
    assert len(kept) == 400
