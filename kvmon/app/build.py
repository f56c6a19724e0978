"""A monitor with its devices: the server's source, this machine's (or a remote ``kvmon serve``'s) GPUs and host, the
analyzer; one ``Monitor`` per server, one ``GroupMonitor`` per model list (router, llama-swap)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kvmon.app.detection import find_servers
from kvmon.app.group_monitor import GroupMonitor
from kvmon.app.monitor import Monitor
from kvmon.core.analysis import Analyzer, AnalyzerSettings
from kvmon.core.readings import FailureKind, SourceError, SourceFailure
from kvmon.sources.base import GpuSource, HostSource, ModelListSource


def default_gpu_source(nvml: Any = None, settings: AnalyzerSettings | None = None) -> GpuSource | None:
    """Every device source of this system (NVML, AMD and Intel sysfs, Apple); a machine with none says so."""
    from kvmon.sources.devices import default_device_sources

    user = dict(settings.gpu_bandwidth_bytes_per_s) if settings else None
    return default_device_sources(nvml, user)



def default_host_source(settings: AnalyzerSettings | None = None) -> HostSource:
    """psutil for host RAM and the server's RSS."""
    from kvmon.sources.host import HostSource as PsutilHost

    return PsutilHost(settings.host_bandwidth_bytes_per_s if settings else None, auto_probe=True)



def open_monitor(url: str | None, *, api_key: str | None = None, timeout_s: float = 3.0,
                 log_path: str | None = None, settings: AnalyzerSettings | None = None, nvml: Any = None,
                 gpu: bool = True, host: bool = True, candidates: Sequence[str] | None = None,
                 recorder: Any = None, backend: str | None = None, devices_url: str | None = None,
                 settings_source: Callable[[], AnalyzerSettings | None] | None = None,
                 atlas: bool = True) -> Monitor | GroupMonitor:
    """A monitor on ``url``; with no URL, the first server found on this machine (``find_servers``).

    Each candidate is asked once: the backend it answered as opens its source (``backend`` skips the question).
    Raises SourceError (UNREACHABLE) when no URL is given and nothing answers. ``recorder``: where every snapshot
    is recorded. ``devices_url``: the ``kvmon serve`` on the server's machine whose GPUs and host to read (a server on
    another machine without one has no device readings, said so; this machine's are not its).
    ``settings_source``: the session's current settings, asked before every poll (see ``Session.settings``).
    ``atlas``: keep the session's measured points in the atlas of measured curves, and show the earlier ones.
    """
    from kvmon.sources.detect import open_source
    from kvmon.sources.discover import nothing_found_reason

    if url is None:
        found = find_servers(api_key=api_key, timeout_s=timeout_s, candidates=candidates)
        answering = found.answering()
        if not answering:
            raise SourceError(SourceFailure(FailureKind.UNREACHABLE, nothing_found_reason(found)))
        url, backend = answering[0].url, answering[0].backend
    source = open_source(url, api_key=api_key, timeout_s=timeout_s, log_path=log_path, backend=backend)
    gpu_src, host_src = device_sources(url, devices_url, settings=settings, nvml=nvml, gpu=gpu, host=host)
    from kvmon.app.atlas import SessionCurves, atlas_enabled

    curves = SessionCurves() if atlas and atlas_enabled() else None
    if isinstance(source, ModelListSource):  # a router's or llama-swap's list of models
        return GroupMonitor(source, gpu_src, host_src, settings, recorder=recorder, settings_source=settings_source,
                            timeout_s=timeout_s, curves=curves)
    analyzer = Analyzer(settings, settings_source=settings_source, curve_memory=curves)
    return Monitor(source, gpu_src, host_src, analyzer, recorder=recorder, timeout_s=timeout_s, curves=curves)



def device_sources(url: str, devices_url: str | None, *, settings: AnalyzerSettings | None = None, nvml: Any = None,
                   gpu: bool = True, host: bool = True) -> tuple[Any, Any]:
    """(GPU source, host source) for a server at ``url``: a remote ``kvmon serve``'s when ``devices_url`` is given,
    this machine's when the server runs here, else sources that say why there are no device readings."""
    from urllib.parse import urlsplit

    from kvmon.sources.http import normalize_base_url
    from kvmon.sources.procs import is_local_host

    if devices_url:
        from kvmon.sources.remote_devices import RemoteDevices

        remote = RemoteDevices(devices_url)
        return (remote if gpu else None), (remote.host_source() if host else None)
    if not is_local_host(urlsplit(normalize_base_url(url)).hostname):
        from kvmon.sources.remote_devices import NoDevices, NoHost

        return (NoDevices() if gpu else None), (NoHost() if host else None)
    return (default_gpu_source(nvml, settings) if gpu else None), (default_host_source(settings) if host else None)

