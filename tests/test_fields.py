"""The Snapshot's readings described once: every document that carries a reading reads the one description."""

from __future__ import annotations

import dataclasses
import math

from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry
from synthetic import SyntheticMonitor

from kvmon.core import fields
from kvmon.core.history import SERIES, History
from kvmon.core.recording_csv import HEADER
from kvmon.core.report_json import snapshot_to_json
from kvmon.core.report_prometheus import snapshot_families
from kvmon.core.snapshot import ModelView, Snapshot

# Snapshot fields that are not a number to describe: each document gives them a structure of its own
NOT_READINGS = {"seq", "t_monotonic", "t_wall", "connection", "backend", "server_version", "url", "model", "slots",
                "activity", "decode_rate_source", "ceiling_curve", "ceiling_suspect", "gpus",
                "gpus_unavailable_reason", "host", "forecast", "alerts", "provenance", "reasons", "extra", "serving",
                "speculative", "energy", "latency",  # structures: their numbers are fields of their own (power_w, …)
                "verdict", "last_decode", "decode_before",  # structures of their own in each document
                "atlas",  # what the atlas of measured curves remembers: once --json's atlas object
                "bandwidth_headroom_fraction"}  # the last: a share the bandwidth panel draws, exported nowhere
# numeric ModelView fields that are settings or shape, not readings (the "model" object carries them)
MODEL_NOT_READINGS = {"n_params", "n_layers", "n_ctx_train", "recurrent_state_bytes", "kv_allocated_bytes",
                      "fit_target_bytes"}


def test_every_numeric_reading_is_described() -> None:
    """A new number on the Snapshot fails here until it is described (name, unit, help, where exported)."""
    top = {f.name for f in dataclasses.fields(Snapshot)} - NOT_READINGS
    assert top <= set(fields.BY_NAME), top - set(fields.BY_NAME)
    model_numbers = {f.name for f in dataclasses.fields(ModelView)
                     if "int" in str(f.type) or "float" in str(f.type)} - MODEL_NOT_READINGS
    assert model_numbers <= set(fields.BY_NAME), model_numbers - set(fields.BY_NAME)
    for f in fields.FIELDS:
        assert f.help.endswith((".", ")")) and f.unit and (f.prometheus or f.json or f.csv or f.history)


def test_the_documents_read_the_description() -> None:
    s = SyntheticMonitor().snapshot(7)
    doc = snapshot_to_json(s)
    for f in fields.JSON_FIELDS:
        assert doc[f.name] == f.get(s)
    assert [n for n in HEADER if n in fields.BY_NAME] == [f.name for f in fields.CSV_FIELDS]
    assert SERIES == tuple(f.name for f in fields.HISTORY_FIELDS)
    h = History(capacity=8)
    h.append(s)
    view = h.view()
    for f in fields.HISTORY_FIELDS:
        v = f.get(s)
        assert (math.isnan(view.series[f.name][-1]) if v is None else math.isclose(view.series[f.name][-1], v))

    class _One:
        def collect(self):  # type: ignore[no-untyped-def]
            return snapshot_families(s, backend="llama-server", server="http://127.0.0.1:8080")

    reg = CollectorRegistry()
    reg.register(_One())
    families = {fam.name: fam for fam in text_string_to_metric_families(generate_latest(reg).decode())}
    for f in fields.PROMETHEUS_FIELDS:
        v = f.get(s)
        if v is None:
            continue
        fam = families[str(f.prometheus)]
        assert fam.documentation == f.help
        assert math.isclose(fam.samples[0].value, float(v))
