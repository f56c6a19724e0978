"""Device readings of another machine: the GPUs, unified memory and host RAM that a ``kvmon serve`` running beside a
remote model server exports at its ``/metrics`` (``kvmon.core.report_prometheus``), read back as kvmon's own
readings: each device with its kind, vendor, the source that read it there and where its bandwidth came from.

When the model server is on another machine this machine's GPUs say nothing about it, so kvmon reads the devices
there, from one URL (``--devices http://that-host:9464``); without one it says that it cannot see them, rather
than showing the local ones. One scrape serves the GPU and the host reading of the same poll.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from kvmon.core.bounds import MAX_BYTES, MAX_DEVICES
from kvmon.core.readings import GpuReading, GpuSetReading, HostReading, PcieLink, SourceError
from kvmon.core.sanitize import plain_text
from kvmon.sources.http import HttpClient, normalize_base_url, raise_for_status

SCRAPE_REUSE_S = 0.5  # the GPU and host parts of one poll share a scrape
STALE_AFTER_S = 60.0  # the remote exporter polls every few seconds; a sample this old is not "now"
NO_REMOTE_DEVICES = ("the model server runs on another machine: its GPUs are not this machine's; run `kvmon serve` "
                     "there and give its URL (--devices http://HOST:9464, or Settings) for its device readings")

# kvmon_gpu_* series → GpuReading fields (a ratio series is turned back into percent)
_GPU_FIELDS: Mapping[str, tuple[str, float]] = {
    "kvmon_gpu_vram_total_bytes": ("vram_total_bytes", 1.0),
    "kvmon_gpu_vram_used_bytes": ("vram_used_bytes", 1.0),
    "kvmon_gpu_vram_free_bytes": ("vram_free_bytes", 1.0),
    "kvmon_gpu_server_bytes": ("server_used_bytes", 1.0),
    "kvmon_gpu_other_processes_bytes": ("other_processes_used_bytes", 1.0),
    "kvmon_gpu_peak_bandwidth_bytes_per_second": ("peak_bandwidth_bytes_per_s", 1.0),
    "kvmon_gpu_memory_busy_ratio": ("memory_busy_percent", 100.0),
    "kvmon_gpu_busy_ratio": ("gpu_busy_percent", 100.0),
    "kvmon_gpu_pcie_rx_bytes_per_second": ("pcie_rx_bytes_per_s", 1.0),
    "kvmon_gpu_pcie_tx_bytes_per_second": ("pcie_tx_bytes_per_s", 1.0),
    "kvmon_gpu_power_watts": ("power_w", 1.0),
    "kvmon_gpu_temperature_celsius": ("temperature_c", 1.0),
    "kvmon_gpu_working_set_limit_bytes": ("working_set_limit_bytes", 1.0),
    "kvmon_gpu_spill_used_bytes": ("spill_used_bytes", 1.0),
    "kvmon_gpu_spill_total_bytes": ("spill_total_bytes", 1.0),
}
_INT_FIELDS = frozenset({"vram_total_bytes", "vram_used_bytes", "vram_free_bytes", "server_used_bytes",
                         "other_processes_used_bytes", "working_set_limit_bytes", "spill_used_bytes",
                         "spill_total_bytes"})
# kvmon_device_info labels, each a GpuReading field of the same name (an empty label is unknown)
_INFO_FIELDS = ("kind", "vendor", "source", "bandwidth_source", "working_set_source", "pci_bus_id", "memory_type")


@dataclass(frozen=True)
class Scrape:
    """One ``/metrics`` answer of a remote kvmon: GPU readings by index, the host's numbers, when it last polled."""

    gpus: tuple[GpuReading, ...] = ()
    host: Mapping[str, float] = field(default_factory=dict)
    last_poll_wall: float | None = None
    host_labels: Mapping[str, str] = field(default_factory=dict)  # bandwidth source, CPU name, memory type
    dropped: Mapping[str, str] = field(default_factory=dict)  # series → why its value was not taken


def _index(label: str | None) -> int | None:
    """A device index label as a number: ASCII digits below MAX_DEVICES, else None (not a device kvmon exports)."""
    if label is None or not (label.isascii() and label.isdigit()) or len(label) > 6:
        return None
    index = int(label)
    return index if index < MAX_DEVICES else None


def _usable(value: float) -> bool:
    """Every device series is a size, a rate, a ratio, a temperature or a time: finite, not negative, bounded."""
    return math.isfinite(value) and 0.0 <= value <= MAX_BYTES


def parse_exporter_text(text: str, source: str) -> Scrape:
    """The devices in a kvmon exporter's Prometheus text; ``source`` names it in each GPU's reasons."""
    from prometheus_client.parser import text_string_to_metric_families

    by_index: dict[int, dict[str, object]] = {}
    info: dict[int, Mapping[str, str]] = {}
    host: dict[str, float] = {}
    host_labels: dict[str, str] = {}
    last: float | None = None
    dropped: dict[str, str] = {}  # host and other series
    gpu_dropped: dict[int, dict[str, str]] = {}  # per GPU: field → why
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            name = sample.name
            labels = {k: plain_text(v) for k, v in sample.labels.items()}  # names shown as they came: plain
            try:
                value = float(sample.value)
            except OverflowError:  # an integer literal past any float
                value = math.inf
            gpu = _index(labels.get("gpu"))
            if not _usable(value):  # one impossible value is dropped, never the whole machine's readings
                why = f"{source} sent {value!r} for {name}: not a size, rate or time (dropped)"
                if gpu is not None and name in _GPU_FIELDS:
                    gpu_dropped.setdefault(gpu, {})[_GPU_FIELDS[name][0]] = why
                else:
                    dropped[name] = why
                continue
            if name == "kvmon_last_poll_timestamp_seconds":
                last = value
            elif name == "kvmon_host_bandwidth_info":
                host_labels["bandwidth_source"] = labels.get("source", "")
            elif name == "kvmon_host_info":
                host_labels.update({k: labels.get(k, "") for k in ("cpu_name", "memory_type")})
            elif name.startswith("kvmon_host_") or name == "kvmon_server_rss_bytes":
                host[name] = value
            elif name == "kvmon_device_info" and gpu is not None:
                info[gpu] = labels
            elif name in _GPU_FIELDS and gpu is not None:
                g = by_index.setdefault(gpu, {"name": labels.get("gpu_name") or None})
                attr, scale = _GPU_FIELDS[name]
                g[attr] = int(value) if attr in _INT_FIELDS else value * scale
            elif name == "kvmon_gpu_pcie_bandwidth_bytes_per_second" and gpu is not None:
                by_index.setdefault(gpu, {"name": labels.get("gpu_name") or None})["pcie"] = \
                    PcieLink(bandwidth_bytes_per_s=value)
    gpus = []
    for index, values in sorted(by_index.items()):
        device_labels = info.get(index, {})
        if device_labels.get("source") == "log":
            continue  # a device only the server's log names there: no reading (this side's log names it again)
        reasons = {"source": f"read from {source}"}
        if "server_used_bytes" not in values:
            reasons["server_used_bytes"] = f"{source} does not say which GPU memory is the model server's"
        values.update({k: device_labels[k] for k in _INFO_FIELDS if device_labels.get(k)})
        vendor_index = _index(device_labels.get("vendor_index"))
        if vendor_index is not None:
            values["vendor_index"] = vendor_index
        reasons.update(gpu_dropped.get(index, {}))
        if values.get("peak_bandwidth_bytes_per_s") is None:
            values.pop("bandwidth_source", None)
        elif "bandwidth_source" not in values:  # an exporter that does not say where it came from
            values["bandwidth_source"] = "remote"
        gpus.append(GpuReading(index=index, reasons=reasons, **values))  # type: ignore[arg-type]  # its fields by name
    return Scrape(tuple(gpus), host, last, host_labels, dropped)


class RemoteDevices:
    """The GPUs (``poll``) and, through ``host_source()``, the host of the machine a remote ``kvmon serve`` runs on."""

    def __init__(self, url: str, *, timeout_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        base = normalize_base_url(url)
        self.metrics_url = base if base.endswith("/metrics") else base + "/metrics"
        root, _, _path = self.metrics_url.rpartition("/metrics")
        self._http = HttpClient(root, timeout_s=timeout_s)
        self.display_url = self._http.display_url + "/metrics"
        self._clock = clock
        self._last: tuple[float, Scrape | None, str | None] | None = None  # (when, scrape, why none)

    def __repr__(self) -> str:
        return f"RemoteDevices({self.display_url!r})"

    def scrape(self) -> tuple[Scrape | None, str | None]:
        """The remote devices now (one request per poll at most), or (None, why)."""
        now = self._clock()
        if self._last is not None and 0.0 <= now - self._last[0] < SCRAPE_REUSE_S:
            return self._last[1], self._last[2]
        scrape: Scrape | None = None
        why: str | None = None
        try:
            resp = self._http.get("/metrics")
            raise_for_status(resp, "/metrics", self._http.display_url)
            scrape = parse_exporter_text(resp.text, self.display_url)
        except SourceError as e:
            why = f"device readings from {self.display_url}: {e.failure.reason}"
        except ValueError as e:  # not Prometheus text
            why = f"device readings from {self.display_url}: not a kvmon exporter's metrics ({str(e)[:60]})"
        if scrape is not None and not scrape.gpus and not scrape.host:
            why, scrape = f"{self.display_url} exports no kvmon device readings (is it `kvmon serve`?)", None
        if scrape is not None and scrape.last_poll_wall is not None and time.time() - scrape.last_poll_wall > \
                STALE_AFTER_S:
            why, scrape = (f"device readings from {self.display_url} are "
                           f"{time.time() - scrape.last_poll_wall:.0f} s old (its kvmon serve stopped polling?)"), None
        self._last = (now, scrape, why)
        return scrape, why

    def poll(self, server_pids: Collection[int] = ()) -> GpuSetReading:
        """The remote machine's GPUs; the split by process is the remote exporter's (it watches the server there)."""
        scrape, why = self.scrape()
        if scrape is None:
            return GpuSetReading(t_monotonic=self._clock(), unavailable_reason=why)
        if not scrape.gpus:
            return GpuSetReading(t_monotonic=self._clock(),
                                 unavailable_reason=f"{self.display_url} reports no GPU (a machine without one?)")
        return GpuSetReading(t_monotonic=self._clock(), gpus=scrape.gpus)

    def host_source(self) -> RemoteHost:
        return RemoteHost(self)

    def close(self) -> None:
        self._http.close()


class RemoteHost:
    """The remote machine's RAM and its model server's resident memory, from the same scrape."""

    def __init__(self, devices: RemoteDevices) -> None:
        self.devices = devices

    def poll(self, server_pids: Collection[int] = ()) -> HostReading:
        scrape, why = self.devices.scrape()
        t = self.devices._clock()
        if scrape is None:
            return HostReading(t_monotonic=t, reasons={"host": why or "no device readings"})
        h = scrape.host

        def i(name: str) -> int | None:
            return int(h[name]) if name in h else None

        bw = h.get("kvmon_host_bandwidth_bytes_per_second")
        labels = scrape.host_labels
        return HostReading(t_monotonic=t, ram_total_bytes=i("kvmon_host_ram_total_bytes"),
                           ram_available_bytes=i("kvmon_host_ram_available_bytes"),
                           swap_total_bytes=i("kvmon_host_swap_total_bytes"),
                           swap_used_bytes=i("kvmon_host_swap_used_bytes"),
                           server_rss_bytes=i("kvmon_server_rss_bytes"), host_bandwidth_bytes_per_s=bw,
                           host_bandwidth_source=(labels.get("bandwidth_source") or "remote") if bw is not None
                           else None,
                           host_bandwidth_measured_at_unix_s=h.get("kvmon_host_bandwidth_measured_timestamp_seconds"),
                           memory_type=labels.get("memory_type") or None, cpu_name=labels.get("cpu_name") or None,
                           reasons={"host": f"read from {self.devices.display_url}",
                                    **scrape.dropped})

    def close(self) -> None:
        """The devices object owns the connection."""


class NoDevices:
    """The devices of a server on another machine when no remote exporter is given: unknown, and why."""

    def __init__(self, reason: str = NO_REMOTE_DEVICES, clock: Callable[[], float] = time.monotonic) -> None:
        self.reason = reason
        self._clock = clock

    def poll(self, server_pids: Collection[int] = ()) -> GpuSetReading:
        return GpuSetReading(t_monotonic=self._clock(), unavailable_reason=self.reason)

    def close(self) -> None:
        """Nothing to release."""


class NoHost:
    """The host of a server on another machine when no remote exporter is given: unknown, and why."""

    def __init__(self, reason: str = NO_REMOTE_DEVICES, clock: Callable[[], float] = time.monotonic) -> None:
        self.reason = reason
        self._clock = clock

    def poll(self, server_pids: Collection[int] = ()) -> HostReading:
        return HostReading(t_monotonic=self._clock(), reasons={"host": self.reason})

    def close(self) -> None:
        """Nothing to release."""
