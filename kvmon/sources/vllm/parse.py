"""vLLM's answers as plain values: ``/metrics`` (Prometheus text, read with prometheus_client's parser) per served
model, ``vllm:cache_config_info``'s labels, and the model cards of ``/v1/models``.

Names as vLLM's V1 engine declares them (``vllm/v1/metrics/loggers.py``; prometheus_client adds ``_total`` to
counters): every engine series carries ``model_name`` and ``engine`` (the data-parallel rank). Renames followed,
newest first, so a server from either side of a deprecation is read: ``kv_cache_usage_perc`` (older
``gpu_cache_usage_perc``, deprecated in vllm#18354, removed in #29330), ``inter_token_latency_seconds`` (older
``time_per_output_token_seconds``, #24110, removed in #32661), ``prefix_cache_*`` (older ``gpu_prefix_cache_*``).
V0 servers (``vllm/engine/metrics.py``) wrote the same names without the ``engine`` label. Data-parallel engines
of one model add up (their pools are separate); the usage fraction is their mean (equal pools).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from kvmon.core.jsonvals import json_float, json_int, json_str, json_text, text_int
from kvmon.core.readings import ACCEPTED_PER_POSITION, MAX_DRAFT_POSITIONS, position_counter, position_counts
from kvmon.core.sanitize import clean_text

PREFIX = "vllm:"
# (what kvmon calls it, exposed names newest first)
USAGE = ("kv_cache_usage_perc", "gpu_cache_usage_perc")
ITL = ("inter_token_latency_seconds", "time_per_output_token_seconds")
TTFT = ("time_to_first_token_seconds",)
PREFILL_TIME = ("request_prefill_time_seconds",)  # per finished request: seconds in prefill
PREFILL_TOKENS = ("request_prefill_kv_computed_tokens",)  # per finished request: prompt tokens computed (not cached)
PREFIX_HITS = ("prefix_cache_hits_total", "gpu_prefix_cache_hits_total")
PREFIX_QUERIES = ("prefix_cache_queries_total", "gpu_prefix_cache_queries_total")
_SUMMED = {"num_requests_running": "requests_running", "num_requests_waiting": "requests_waiting",
           "prompt_tokens_total": "prompt_tokens_total", "generation_tokens_total": "generation_tokens_total",
           "num_preemptions_total": "preemptions_total",
           # speculative decoding (vllm/v1/spec_decode/metrics.py): drafts, drafted and accepted tokens
           "spec_decode_num_drafts_total": "spec_drafts_total",
           "spec_decode_num_draft_tokens_total": "spec_draft_tokens_total",
           "spec_decode_num_accepted_tokens_total": "spec_accepted_tokens_total"}


@dataclass(frozen=True)
class Histogram:
    """A latency histogram's running sum and count (seconds, observations) and the exposed name it came under."""

    name: str
    sum_s: float
    count: float


@dataclass(frozen=True)
class ModelMetrics:
    """One served model's series, data-parallel engines combined; None where the page had no readable value."""

    model_name: str
    engines: int = 1
    kv_usage_fraction: float | None = None
    kv_usage_name: str | None = None  # which exposed name the usage came from (old servers: gpu_cache_usage_perc)
    requests_running: float | None = None
    requests_waiting: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    preemptions_total: float | None = None
    spec_drafts_total: float | None = None
    spec_draft_tokens_total: float | None = None
    spec_accepted_tokens_total: float | None = None
    spec_accepted_per_position: tuple[float, ...] = ()  # accepted drafted tokens at positions 0, 1, …
    prefix_cache_hits_total: float | None = None
    prefix_cache_queries_total: float | None = None
    awake: bool | None = None  # vllm:engine_sleep_state{sleep_state="awake"}: False while the engine sleeps
    ttft: Histogram | None = None
    itl: Histogram | None = None
    prefill_time: Histogram | None = None
    prefill_tokens: Histogram | None = None


@dataclass(frozen=True)
class CacheConfig:
    """``vllm:cache_config_info``'s labels that size the KV pool (blocks over all data-parallel engines)."""

    num_gpu_blocks: int | None = None
    block_size: int | None = None
    cache_dtype: str | None = None
    kv_cache_size_tokens: int | None = None
    engines: int = 0

    @property
    def capacity_tokens(self) -> int | None:
        """Tokens the pool holds: vLLM's own ``kv_cache_size_tokens`` (right for hybrid block sizes), else blocks
        × block size."""
        if self.kv_cache_size_tokens:
            return self.kv_cache_size_tokens
        if self.num_gpu_blocks and self.block_size:
            return self.num_gpu_blocks * self.block_size
        return None


@dataclass(frozen=True)
class MetricsPage:
    """A parsed ``/metrics`` page: each model's series, the cache config, and what could not be read."""

    models: Mapping[str, ModelMetrics] = field(default_factory=dict)
    cache: CacheConfig = field(default_factory=CacheConfig)
    has_vllm: bool = False  # any vllm: series at all
    notes: tuple[str, ...] = ()


def _samples(text: str, notes: list[str]) -> Iterable[tuple[str, Mapping[str, str], float]]:
    """Every ``vllm:`` sample of the page; lines the parser refuses are left out one by one and counted."""
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError, KeyError):
        families = None
    if families is None:  # read line by line: one bad line loses only itself
        bad: list[str] = []
        families = []
        for line in text.split("\n"):  # Prometheus ends a line at "\n" alone (a label value may hold U+2028)
            if not line.startswith(PREFIX):
                continue
            try:
                families += list(text_string_to_metric_families(line + "\n"))
            except (ValueError, TypeError, IndexError, KeyError):
                bad.append(clean_text(line[:60]))
        if bad:
            notes.append(f"{len(bad)} /metrics line(s) not readable as Prometheus samples (first: {bad[0]!r})")
    for fam in families:
        for s in fam.samples:
            if s.name.startswith(PREFIX):
                yield s.name[len(PREFIX):], s.labels, s.value


def parse_metrics(text: str) -> MetricsPage:
    """The vLLM series of a ``/metrics`` page, per ``model_name``; values that are not finite non-negative numbers
    are unknown (and noted), never 0."""
    notes: list[str] = []
    per: dict[str, dict[str, Any]] = {}
    engines: dict[str, set[str]] = {}
    cache_rows: list[Mapping[str, str]] = []
    seen = False
    for name, labels, raw in _samples(text, notes):
        seen = True
        if name == "cache_config_info":
            cache_rows.append(labels)
            continue
        model = json_str(labels.get("model_name"))
        if model is None:
            continue
        value = json_float(raw)
        if value is None:
            notes.append(f"vllm:{name} for {model!r} is not a finite non-negative number")
            continue
        acc = per.setdefault(model, {})
        engines.setdefault(model, set()).add(labels.get("engine", ""))
        if name == "engine_sleep_state":  # one series per state; only "awake" says whether it sleeps
            if labels.get("sleep_state") != "awake":
                continue
            name = "engine_awake"
        elif name == ACCEPTED_PER_POSITION:  # speculative decoding's acceptance, one series per draft position
            pos = text_int(labels.get("position"))
            if pos is None or pos >= MAX_DRAFT_POSITIONS:
                notes.append(f"vllm:{name} for {model!r} has a position that is not a draft's")
                continue
            name = position_counter(name, pos)
        acc.setdefault(name, []).append(value)
    models = {m: _model(m, acc, len(engines.get(m, ()))) for m, acc in per.items()}
    return MetricsPage(models, _cache(cache_rows, notes), seen, tuple(notes))


def _first(acc: Mapping[str, list[float]], names: tuple[str, ...]) -> tuple[str | None, list[float]]:
    for n in names:
        if n in acc:
            return n, acc[n]
    return None, []


def _hist(acc: Mapping[str, list[float]], names: tuple[str, ...]) -> Histogram | None:
    for n in names:
        if f"{n}_sum" in acc and f"{n}_count" in acc:
            return Histogram(n, sum(acc[f"{n}_sum"]), sum(acc[f"{n}_count"]))
    return None


def _model(name: str, acc: Mapping[str, list[float]], n_engines: int) -> ModelMetrics:
    usage_name, usage = _first(acc, USAGE)
    fraction = sum(usage) / len(usage) if usage else None
    summed = {field_: sum(acc[k]) if k in acc else None for k, field_ in _SUMMED.items()}
    hits = _first(acc, PREFIX_HITS)[1]
    queries = _first(acc, PREFIX_QUERIES)[1]
    awake = acc.get("engine_awake")
    return ModelMetrics(
        name, max(1, n_engines), fraction, usage_name and PREFIX + usage_name,
        awake=None if not awake else any(v > 0 for v in awake),
        prefix_cache_hits_total=sum(hits) if hits else None,
        prefix_cache_queries_total=sum(queries) if queries else None,
        ttft=_hist(acc, TTFT), itl=_hist(acc, ITL), prefill_time=_hist(acc, PREFILL_TIME),
        prefill_tokens=_hist(acc, PREFILL_TOKENS),
        spec_accepted_per_position=position_counts({k: sum(v) for k, v in acc.items()}, ACCEPTED_PER_POSITION),
        **summed)


def _cache(rows: list[Mapping[str, str]], notes: list[str]) -> CacheConfig:
    """The cache config over every engine's row: blocks and token capacity add up, the rest must agree."""
    if not rows:
        return CacheConfig()
    blocks = [text_int(r.get("num_gpu_blocks")) for r in rows]
    sizes = {text_int(r.get("block_size")) for r in rows}
    tokens = [text_int(r.get("kv_cache_size_tokens")) for r in rows]
    dtypes = {json_str(r.get("cache_dtype")) for r in rows}
    if len(sizes) > 1 or len(dtypes) > 1:
        notes.append("vllm:cache_config_info differs between engines: the cache size is not read")
        return CacheConfig(engines=len(rows))
    if any(b is None and r.get("num_gpu_blocks") not in (None, "None") for b, r in zip(blocks, rows, strict=True)):
        notes.append("vllm:cache_config_info num_gpu_blocks is not a whole number")
    size = next(iter(sizes))
    return CacheConfig(
        num_gpu_blocks=sum(b for b in blocks if b is not None) if all(b is not None for b in blocks) else None,
        block_size=size if size else None,
        cache_dtype=next(iter(dtypes)),
        kv_cache_size_tokens=sum(t for t in tokens if t is not None) if all(t for t in tokens) else None,
        engines=len(rows))


@dataclass(frozen=True)
class ModelCard:
    """One base model of ``/v1/models``: its served name, where it was loaded from, its context limit."""

    id: str
    root: str | None  # as given (a path to open); shown only as plain text
    max_model_len: int | None


def parse_models(body: Any) -> tuple[list[ModelCard], list[str]]:
    """The base models (LoRA adapters, which name a ``parent``, left out) of ``/v1/models``, and what was odd."""
    data = body.get("data") if isinstance(body, Mapping) else None
    if not isinstance(data, list):
        return [], ["/v1/models has no data list"]
    out: list[ModelCard] = []
    notes: list[str] = []
    for raw in data:
        if not isinstance(raw, Mapping) or not json_str(raw.get("id")):
            notes.append("/v1/models has an entry without an id")
            continue
        if json_str(raw.get("parent")):
            continue
        out.append(ModelCard(json_str(raw["id"]) or "", json_text(raw.get("root")), json_int(raw.get("max_model_len"))))
    return out, notes


def server_summary(json: Callable[[str], Any]) -> tuple[str | None, str | None]:
    """(version, a few words on what it serves) for a list of servers, from ``json`` (a path's JSON body, None when
    it answered none)."""
    version = json("/version")
    ids = [card.id for card in parse_models(json("/v1/models"))[0]]  # the base models, not LoRA adapters
    v = json_str(version.get("version")) if isinstance(version, Mapping) else None
    return v, (f"serving: {', '.join(ids)}" if ids else None)
