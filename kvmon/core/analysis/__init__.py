"""Readings + physics → one Snapshot per poll: speeds, ceiling, KV and VRAM split, forecasts, alerts.

``Analyzer`` (``analyzer``) is the only stateful step between sources and the screen; its parts each do one job:
``model_view`` (the model, its context, cache types and KV sizes), ``speeds`` (rates, slots, depth, KV in use),
``gpu_views`` (GPUs, their peak bandwidth and VRAM split, the host), ``placement`` (which bytes live where, and
the devices), ``ceiling`` (the speed the memory bus allows, bandwidth figures), ``vram_trend`` (free VRAM over
the last minute), ``forecasting`` (the fit, its schedule and the milestones), ``advice`` (cheaper cache types),
``alert_facts`` (what the alert rules read), with ``settings``. No I/O;
every number it adds says where it came from (``provenance``) or why it is unknown (``reasons``).
"""

from kvmon.core.analysis.analyzer import Analyzer
from kvmon.core.analysis.settings import NO_GPU_BANDWIDTH, NO_HOST_BANDWIDTH, AnalyzerSettings
from kvmon.core.snapshot import MILESTONES

__all__ = ["MILESTONES", "NO_GPU_BANDWIDTH", "NO_HOST_BANDWIDTH", "Analyzer", "AnalyzerSettings"]
