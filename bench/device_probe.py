"""Figures for the devices work: the host bandwidth probe's cost, its effect on a decoding server (why kvmon runs it
only while every slot is idle), and the CPU time each device source takes per poll.

Prints numbers; asserts nothing. Run: python bench/device_probe.py [--no-server] [--polls 200]

- probe: wall and CPU time of ``HostSource.measure_bandwidth`` (128 MiB arrays, 4 copies), five runs.
- decoding server: the real llama.cpp server of the test suite (xllamacpp, one thread, a tiny llama GGUF at ~8K
  tokens of context, where decode reads its KV cache from RAM) generates 384 tokens with and without probes running
  back to back beside it; its own ``predicted_per_second`` is compared. Then a Monitor polls it while it decodes and
  after: the probe runs only after.
- device sources: ``time.thread_time`` per poll of NVML (fake, two GPUs), amdgpu and Intel sysfs (fixture trees),
  the Apple source (recorded outputs), the host source, and this machine's default device sources.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

FIX = ROOT / "tests" / "fixtures"


def _fmt(values: list[float], unit: str, scale: float = 1.0) -> str:
    v = sorted(x * scale for x in values)
    return f"median {statistics.median(v):.1f} {unit}, min {v[0]:.1f}, max {v[-1]:.1f} (n={len(v)})"


def probe_cost() -> None:
    from kvmon.sources.host import HostSource

    with tempfile.TemporaryDirectory() as tmp:
        walls, cpus, bws = [], [], []
        for _ in range(5):
            src = HostSource(cache_dir=tmp, chip_name=None, system_root=Path(tmp) / "none")
            t0, c0 = time.perf_counter(), time.process_time()
            bws.append(src.measure_bandwidth())
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
    print("host bandwidth probe (2 × 128 MiB, best of 4 copies)")
    print(f"  wall: {_fmt(walls, 'ms', 1e3)}")
    print(f"  CPU:  {_fmt(cpus, 'ms', 1e3)}")
    print(f"  bandwidth measured: {_fmt(bws, 'GB/s', 1e-9)}")


def _decode_tok_s(url: str, prompt: str, n: int) -> float:
    import httpx

    r = httpx.post(f"{url}/completion", json={"prompt": prompt, "n_predict": n, "ignore_eos": True,
                                              "cache_prompt": True}, timeout=600)
    body = r.json()
    if "timings" not in body:
        raise RuntimeError(f"the server did not generate: {str(body)[:300]}")
    return float(body["timings"]["predicted_per_second"])


def decoding_server(tmp: Path) -> None:
    from real_llama_server import RealLlamaServer
    from tiny_gguf import make_gguf

    from kvmon.app.build import open_monitor
    from kvmon.sources.host import HostSource

    model = make_gguf("llama", tmp)
    server = RealLlamaServer(model, ["-c", "16384", "-np", "1", "--metrics"], tmp / "server.log")
    server.start()
    try:
        prompt = "hello world " * 680  # the tiny model's vocabulary is bytes: ~8K tokens, whose KV reads dominate
        _decode_tok_s(server.url, prompt, 8)  # prefill once; later requests reuse the cached prompt
        stop = threading.Event()
        probes = [0]

        def probing() -> None:
            src = HostSource(cache_dir=tmp, chip_name=None, system_root=tmp / "none")
            while not stop.is_set():
                src.measure_bandwidth()
                probes[0] += 1

        alone, beside = [], []
        for _ in range(5):
            alone.append(_decode_tok_s(server.url, prompt, 384))
            stop.clear()
            t = threading.Thread(target=probing, daemon=True)
            t.start()
            beside.append(_decode_tok_s(server.url, prompt, 384))
            stop.set()
            t.join()
        print("decoding server at ~8K context (xllamacpp b11549, 1 thread, tiny llama)")
        print(f"  decode alone:            {_fmt(alone, 'tok/s')}")
        print(f"  decode beside probes:    {_fmt(beside, 'tok/s')} ({probes[0]} probes ran)")
        print(f"  slowdown while probing:  {(1 - statistics.median(beside) / statistics.median(alone)) * 100:.0f} %")

        # the monitor's guard: no probe while the slot decodes, one once it is idle
        done = threading.Event()
        threading.Thread(target=lambda: (_decode_tok_s(server.url, prompt, 400), done.set()), daemon=True).start()
        time.sleep(0.5)
        with open_monitor(server.url, log_path=str(server.log_path)) as m:
            m.devices.host_source = HostSource(cache_dir=tmp / "guard", chip_name=None, system_root=tmp / "none",
                                               auto_probe=True)
            during = 0
            while not done.is_set():
                m.poll()
                during = m.probes_run
                time.sleep(0.2)
            m.poll()
            print(f"  monitor polling while it decoded: {during} probes; after: {m.probes_run}")
    finally:
        server.stop()


def _cpu_per_poll(src: object, polls: int, pids: tuple[int, ...] = ()) -> float:
    src.poll(pids)  # type: ignore[attr-defined]  # first poll: identification, caches
    t0 = time.thread_time()
    for _ in range(polls):
        src.poll(pids)  # type: ignore[attr-defined]
    return (time.thread_time() - t0) / polls


def source_costs(polls: int) -> None:
    from kvmon.sim.fake_nvml import FakeGpu, FakeNvml
    from kvmon.sim.permit import allow
    from kvmon.sources.amdgpu import AmdGpuSource
    from kvmon.sources.apple import AppleSource
    from kvmon.sources.devices import default_device_sources
    from kvmon.sources.host import HostSource
    from kvmon.sources.intel_gpu import IntelGpuSource
    from kvmon.sources.nvml import NvmlSource

    allow("benchmark")  # its fake GPUs stand in for the machine

    recorded = (FIX / "apple" / "sysctl-02-m4max-64gb-macos15-archspec.txt").read_text()
    vm_stat = (FIX / "apple" / "vm_stat-01-m5pro-48gb-macos26.txt").read_text()

    def mac(argv: object) -> str:
        return vm_stat if next(iter(argv)) == "vm_stat" else recorded  # type: ignore[call-overload]

    with tempfile.TemporaryDirectory() as tmp:
        sources = {
            "NVML (fake, 2 GPUs)": NvmlSource(FakeNvml([FakeGpu(), FakeGpu(name="NVIDIA H200")])),
            "amdgpu sysfs (RX 6900 XT tree)": AmdGpuSource(FIX / "sysfs" / "rx6900xt"),
            "Intel sysfs (Arc B580 tree)": IntelGpuSource(FIX / "sysfs" / "b580"),
            "Apple (recorded sysctl, vm_stat; no process spawn)": AppleSource(run=mac, metal=None, platform="darwin"),
            "host (psutil, the server's RSS)": HostSource(cache_dir=tmp, chip_name=None),
            "this machine's device sources": default_device_sources(),
        }
        print(f"device sources, CPU per poll ({polls} polls, this thread)")
        for name, src in sources.items():
            pids = (1,) if "host" in name else ()
            print(f"  {name:52s} {_cpu_per_poll(src, polls, pids) * 1e6:8.0f} µs")
        t0 = time.perf_counter()
        for _ in range(20):
            AppleSource(platform="darwin", metal=None).poll() if sys.platform == "darwin" else None
        if sys.platform == "darwin":
            print(f"  Apple, real tools (sysctl ×2, ioreg, vm_stat per new source): "
                  f"{(time.perf_counter() - t0) / 20 * 1e3:.1f} ms wall")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--no-server", action="store_true", help="skip the decoding-server measurement")
    p.add_argument("--polls", type=int, default=200)
    a = p.parse_args()
    probe_cost()
    if not a.no_server:
        with tempfile.TemporaryDirectory() as tmp:
            decoding_server(Path(tmp))
    source_costs(a.polls)


if __name__ == "__main__":
    main()
