"""HostSource: RAM, swap, the server's RSS from real processes, and host bandwidth (user, table, measured)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from kvmon.sources.host import CACHE_FILE_NAME, HostSource, machine_fingerprint

MIB = 1024**2

# A "server" holding ~64 MiB that starts a child holding ~32 MiB; prints the child's pid when both are ready.
_SERVER = (
    "import subprocess, sys\n"
    "held = bytearray(64 * 1024 * 1024)\n"
    "child = subprocess.Popen([sys.executable, '-c', "
    "'import sys; b = bytearray(32 * 1024 * 1024); print(1, flush=True); sys.stdin.read()'], "
    "stdin=subprocess.PIPE, stdout=subprocess.PIPE)\n"
    "child.stdout.readline()\n"
    "print(child.pid, flush=True)\n"
    "sys.stdin.read()\n"
    "child.kill()\n"
)


@pytest.fixture
def server() -> Iterator[tuple[int, int]]:
    proc = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        yield proc.pid, child
    finally:
        try:
            for c in psutil.Process(proc.pid).children(recursive=True):
                c.kill()
        except psutil.Error:
            pass
        proc.kill()
        proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stdin):
            if stream is not None:
                stream.close()


def _src(tmp_path: Path, **kw: object) -> HostSource:
    kw.setdefault("system_root", tmp_path / "no-udev")  # this machine's udev database must not decide a test
    return HostSource(cache_dir=tmp_path, chip_name=None, **kw)  # type: ignore[arg-type]


def test_ram_swap_and_server_rss_with_its_child(tmp_path: Path, server: tuple[int, int]) -> None:
    parent, child = server
    reading = _src(tmp_path).poll(server_pids=(parent,))
    assert reading.ram_total_bytes is not None and reading.ram_available_bytes is not None
    assert 0 < reading.ram_available_bytes <= reading.ram_total_bytes
    assert reading.swap_total_bytes is not None and reading.swap_used_bytes is not None
    assert reading.server_rss_bytes is not None and reading.server_rss_bytes >= 96 * MIB
    alone = _src(tmp_path, include_child_processes=False).poll(server_pids=(parent,)).server_rss_bytes
    child_only = _src(tmp_path).poll(server_pids=(child,)).server_rss_bytes
    assert alone is not None and child_only is not None
    assert 64 * MIB <= alone < reading.server_rss_bytes and child_only >= 32 * MIB


def test_server_unknown_or_gone(tmp_path: Path) -> None:
    src = _src(tmp_path)
    none = src.poll()
    assert none.server_rss_bytes is None and "not known" in none.reasons["server_rss_bytes"]
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait(timeout=30)
    gone = src.poll(server_pids=(done.pid,))
    assert gone.server_rss_bytes is None and "exited" in gone.reasons["server_rss_bytes"]


def test_access_denied_is_a_reason_not_a_partial_sum(tmp_path: Path, server: tuple[int, int],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    parent, _child = server

    def denied(self: psutil.Process) -> None:
        raise psutil.AccessDenied(self.pid)

    monkeypatch.setattr(psutil.Process, "memory_info", denied)
    reading = _src(tmp_path).poll(server_pids=(parent,))
    assert reading.server_rss_bytes is None and "no permission" in reading.reasons["server_rss_bytes"]


def test_psutil_failing_entirely_leaves_reasons(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise OSError("no /proc/meminfo")

    monkeypatch.setattr(psutil, "virtual_memory", broken)
    monkeypatch.setattr(psutil, "swap_memory", broken)
    reading = _src(tmp_path).poll()
    assert reading.ram_total_bytes is None and "/proc/meminfo" in reading.reasons["ram_total_bytes"]
    assert reading.swap_used_bytes is None and "swap" in reading.reasons["swap_used_bytes"]


def test_bandwidth_unmeasured_then_measured_and_cached(tmp_path: Path) -> None:
    src = _src(tmp_path)
    first = src.poll()
    assert first.host_bandwidth_bytes_per_s is None and first.host_bandwidth_source is None
    assert "not measured" in first.reasons["host_bandwidth_bytes_per_s"]
    bw = src.measure_bandwidth(size_bytes=8 * MIB, repeats=2)
    assert 1e8 < bw < 1e13
    after = src.poll()
    assert after.host_bandwidth_bytes_per_s == bw and after.host_bandwidth_source == "measured"
    assert "host_bandwidth_bytes_per_s" not in after.reasons
    # a later run reads the cache instead of measuring again
    again = _src(tmp_path).poll()
    assert again.host_bandwidth_bytes_per_s == bw and again.host_bandwidth_source == "measured"
    assert json.loads((tmp_path / CACHE_FILE_NAME).read_text())["machine"] == machine_fingerprint()


@pytest.mark.parametrize(("content", "words"), [
    ("{not json", "unreadable"),
    ('{"bandwidth_bytes_per_s": 5e10}', "unreadable"),
    ('{"bandwidth_bytes_per_s": -1, "machine": "%s"}', "not a positive number"),
    ('{"bandwidth_bytes_per_s": 5e10, "machine": "elsewhere|x86_64|64|1"}', "another machine"),
    ('[1, 2]', "unreadable"),
])
def test_bad_cache_files_are_ignored_with_a_reason(tmp_path: Path, content: str, words: str) -> None:
    if "%s" in content:
        content = content % machine_fingerprint()
    (tmp_path / CACHE_FILE_NAME).write_text(content)
    reading = _src(tmp_path).poll()
    assert reading.host_bandwidth_bytes_per_s is None and words in reading.reasons["host_bandwidth_bytes_per_s"]


def test_cache_directory_not_writable_still_returns_the_measurement(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    src = HostSource(cache_dir=blocker / "sub", chip_name=None)  # a directory under a file cannot exist
    bw = src.measure_bandwidth(size_bytes=4 * MIB, repeats=1)
    reading = src.poll()
    assert reading.host_bandwidth_bytes_per_s == bw and "could not be written" in reading.reasons[
        "host_bandwidth_bytes_per_s"]


def test_user_value_wins_then_apple_table(tmp_path: Path) -> None:
    record = {"bandwidth_bytes_per_s": 5e10, "machine": machine_fingerprint()}
    (tmp_path / CACHE_FILE_NAME).write_text(json.dumps(record))
    user = HostSource(120e9, cache_dir=tmp_path, chip_name="Apple M3 Max").poll()
    assert (user.host_bandwidth_bytes_per_s, user.host_bandwidth_source) == (120e9, "user")
    apple = HostSource(cache_dir=tmp_path, chip_name="Apple M3 Max").poll()
    assert (apple.host_bandwidth_bytes_per_s, apple.host_bandwidth_source) == (400e9, "table")
    pc = HostSource(cache_dir=tmp_path, chip_name="AMD Ryzen 9 7950X").poll()
    assert (pc.host_bandwidth_bytes_per_s, pc.host_bandwidth_source) == (5e10, "measured")


# udev's DMI properties as systemd's dmi_memory_id writes them (E:MEMORY_DEVICE_<n>_<KEY>=<value>, one line each),
# carrying the modules of a real Ryzen 9 7950X board (dmidecode in github.com/cyring/CoreFreq/issues/378): four slots,
# two populated with DDR5 rated 4800 MT/s and running 6000, one per channel (P0 CHANNEL A / B).
UDEV_7950X = """\
E:MEMORY_ARRAY_NUM_DEVICES=4
E:MEMORY_DEVICE_0_PRESENT=0
E:MEMORY_DEVICE_0_LOCATOR=DIMM 0
E:MEMORY_DEVICE_0_BANK_LOCATOR=P0 CHANNEL A
E:MEMORY_DEVICE_1_PRESENT=1
E:MEMORY_DEVICE_1_SIZE=17179869184
E:MEMORY_DEVICE_1_LOCATOR=DIMM 1
E:MEMORY_DEVICE_1_BANK_LOCATOR=P0 CHANNEL A
E:MEMORY_DEVICE_1_TYPE=DDR5
E:MEMORY_DEVICE_1_SPEED_MTS=4800
E:MEMORY_DEVICE_1_CONFIGURED_SPEED_MTS=6000
E:MEMORY_DEVICE_2_PRESENT=0
E:MEMORY_DEVICE_2_BANK_LOCATOR=P0 CHANNEL B
E:MEMORY_DEVICE_3_PRESENT=1
E:MEMORY_DEVICE_3_SIZE=17179869184
E:MEMORY_DEVICE_3_BANK_LOCATOR=P0 CHANNEL B
E:MEMORY_DEVICE_3_TYPE=DDR5
E:MEMORY_DEVICE_3_SPEED_MTS=4800
E:MEMORY_DEVICE_3_CONFIGURED_SPEED_MTS=6000
"""


def _udev_root(tmp_path: Path, text: str) -> Path:
    root = tmp_path / "root"
    (root / "run" / "udev" / "data").mkdir(parents=True)
    (root / "run" / "udev" / "data" / "+dmi:id").write_text(text)
    (root / "proc").mkdir()
    (root / "proc" / "cpuinfo").write_text("processor\t: 0\nmodel name\t: AMD Ryzen 9 7950X 16-Core Processor\n")
    return root


def test_reported_memory_gives_a_table_bandwidth_until_measured(tmp_path: Path) -> None:
    src = HostSource(cache_dir=tmp_path, chip_name=None, system_root=_udev_root(tmp_path, UDEV_7950X))
    r = src.poll()
    # DDR5-6000 on two 64-bit channels: 96 GB/s peak
    assert (r.host_bandwidth_bytes_per_s, r.host_bandwidth_source) == (96e9, "table")
    assert "DDR5-6000 × 2 channels" in (r.host_bandwidth_note or "") and "not measured" in (r.host_bandwidth_note or "")
    assert r.memory_type == "DDR5-6000" and r.cpu_name == "AMD Ryzen 9 7950X 16-Core Processor"
    bw = src.measure_bandwidth(size_bytes=4 * MIB, repeats=1)
    m = src.poll()
    assert (m.host_bandwidth_bytes_per_s, m.host_bandwidth_source) == (bw, "measured")
    assert m.host_bandwidth_measured_at_unix_s is not None and m.host_bandwidth_note is None


def test_udev_without_a_memory_type_is_no_table_figure(tmp_path: Path) -> None:
    # systemd before 255 wrote "<OUT OF SPEC>" for DDR5 (github.com/systemd/systemd/issues/30857)
    text = UDEV_7950X.replace("TYPE=DDR5", "TYPE=<OUT OF SPEC>")
    r = HostSource(cache_dir=tmp_path, chip_name=None, system_root=_udev_root(tmp_path, text)).poll()
    assert r.host_bandwidth_bytes_per_s is None and "kind and speed" in r.reasons["host_bandwidth_bytes_per_s"]


def test_probe_is_due_once_and_only_when_nothing_else_knows(tmp_path: Path) -> None:
    root = tmp_path / "no-udev"
    assert not HostSource(cache_dir=tmp_path, chip_name=None, system_root=root).probe_due()  # not asked to
    src = HostSource(cache_dir=tmp_path, chip_name=None, system_root=root, auto_probe=True)
    assert src.probe_due()
    src.measure_bandwidth(size_bytes=4 * MIB, repeats=1)
    assert not src.probe_due()
    # another process on this machine finds the measurement and does not measure again
    assert not HostSource(cache_dir=tmp_path, chip_name=None, system_root=root, auto_probe=True).probe_due()
    assert not HostSource(60e9, cache_dir=tmp_path / "x", chip_name=None, auto_probe=True).probe_due()  # user's
    assert not HostSource(cache_dir=tmp_path / "y", chip_name="Apple M2 Max", auto_probe=True).probe_due()  # table
