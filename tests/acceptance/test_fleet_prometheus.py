"""The fleet on Prometheus: ``kvmon serve`` watching a simulated vLLM and a simulated llama-server and the devices,
scraped by a real Prometheus (Debian's package) on a loopback port and queried back through its HTTP API; the
shipped alerting rules checked by ``promtool`` (loaded by that Prometheus, and fired by ``promtool test rules``);
the shipped Grafana dashboard checked against the metric names kvmon exports."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers_http import wait_until
from prometheus_client.parser import text_string_to_metric_families
from repo_paths import ROOT

from kvmon.app.monitor import DevicePoller, Monitor
from kvmon.cli.serve import Exporter
from kvmon.cli.serve import run as run_serve
from kvmon.core.alert_types import AlertThresholds
from kvmon.core.alerts import AlertEngine
from kvmon.core.analysis import Analyzer
from kvmon.sim.server import SimServer
from kvmon.sources.llamacpp.source import LlamaServerSource
from kvmon.sources.nvml import NvmlSource
from kvmon.sources.vllm.source import VllmSource

RULES = ROOT / "resources" / "prometheus" / "kvmon-rules.yml"  # kvmon --print-path prometheus-rules
DASHBOARD = ROOT / "resources" / "grafana" / "kvmon-fleet.json"  # kvmon --print-path grafana
PROMETHEUS = shutil.which("prometheus") or ("/usr/bin/prometheus" if os.path.exists("/usr/bin/prometheus") else None)
PROMTOOL = shutil.which("promtool") or ("/usr/bin/promtool" if os.path.exists("/usr/bin/promtool") else None)
needs_prometheus = pytest.mark.skipif(PROMETHEUS is None, reason="Prometheus is not installed (Debian: apt install "
                                      "prometheus); the fleet is not scraped")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian package prometheus)")


def exported_names() -> set[str]:
    """Every series name kvmon serve can export, read from the code that writes them (counters get ``_total``) and
    from the readings' one description."""
    from kvmon.core.fields import PROMETHEUS_FIELDS

    names: set[str] = {str(f.prometheus) for f in PROMETHEUS_FIELDS}
    for module in [*sorted((ROOT / "kvmon/core").glob("report_*.py")), ROOT / "kvmon/cli/serve.py"]:
        text = module.read_text()
        every = set(re.findall(r'\(\s*"(kvmon_[a-z0-9_]+)",', text))  # a family's name is its first argument
        counters = set(re.findall(r'counter\(\s*"(kvmon_[a-z0-9_]+)"', text))
        histograms = set(re.findall(r'histogram\(\s*"(kvmon_[a-z0-9_]+)"', text))
        names |= (every - counters - histograms) | {n + "_total" for n in counters}
        names |= {n + suffix for n in histograms for suffix in ("_bucket", "_sum", "_count")}
    return names


def _names_in(expr: str) -> set[str]:
    return set(re.findall(r"\b(kvmon_[a-z0-9_]+)", expr))


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


def _query(base: str, expr: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return body["data"]["result"]


# ------------------------------------------------------------------------------------------------ static checks


def test_the_dashboard_queries_only_series_kvmon_exports() -> None:
    names = exported_names()
    assert "kvmon_decode_tokens_per_second" in names and "kvmon_exporter_polls_total" in names
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["query"]["query"] for v in dash["templating"]["list"]]
    used = set().union(*(_names_in(e) for e in exprs))
    assert used and used <= names, sorted(used - names)
    # what the issue asks the dashboard to show
    for wanted in ("kvmon_decode_tokens_per_second", "kvmon_ceiling_tokens_per_second", "kvmon_kv_cache_in_use_bytes",
                   "kvmon_kv_cache_allocated_bytes", "kvmon_gpu_vram_used_bytes", "kvmon_gpu_vram_free_bytes",
                   "kvmon_alerts_active"):
        assert wanted in used
    assert all(p["datasource"]["uid"] == "${DS_PROMETHEUS}" for p in dash["panels"])


def test_the_rules_hold_as_long_as_kvmon_does() -> None:
    doc = yaml.safe_load(RULES.read_text())
    rules = [r for g in doc["groups"] for r in g["rules"]]
    hold = AlertThresholds().min_hold_s
    assert rules and all(r["for"] == f"{hold:g}s" for r in rules), [r["for"] for r in rules]
    codes = {name for name, _ in AlertEngine()._rules()}
    used = {c for r in rules for c in re.findall(r'code="([a-z_]+)"', r["expr"])}
    assert {"kv_in_host", "weights_in_host", "vram_full_soon", "ctx_full_soon"} <= used <= codes
    assert set().union(*(_names_in(r["expr"]) for r in rules)) <= exported_names()


@needs_promtool
def test_promtool_checks_and_fires_the_rules(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    check = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    hold = int(AlertThresholds().min_hold_s)
    tests = {"rule_files": [str(RULES)], "evaluation_interval": "5s", "tests": [{
        "interval": "5s",
        "input_series": [
            {"series": 'kvmon_alerts_active{instance="gpu1:9464",server="http://127.0.0.1:8000",level="critical",'
                       'code="kv_in_host"}', "values": "1x20"},
            {"series": 'kvmon_alerts_active{instance="gpu1:9464",server="http://127.0.0.1:9931",level="warning",'
                       'code="ctx_full_soon"}', "values": "1 1 0x20"}],
        "alert_rule_test": [
            {"eval_time": f"{hold - 5}s", "alertname": "KvmonKvCacheInHostRam", "exp_alerts": []},
            {"eval_time": f"{hold + 5}s", "alertname": "KvmonKvCacheInHostRam", "exp_alerts": [{
                "exp_labels": {"instance": "gpu1:9464", "server": "http://127.0.0.1:8000", "severity": "critical"},
                "exp_annotations": {
                    "summary": "KV cache spilled to host RAM on http://127.0.0.1:8000",
                    "description": "Part of the KV cache of http://127.0.0.1:8000 (gpu1:9464) lives in host RAM: "
                                   "decode is capped by host or PCIe bandwidth. Free VRAM, lower the context or use a "
                                   "smaller cache type."}}]},
            # raised for 5 s only (shorter than kvmon's hold): Prometheus does not fire
            {"eval_time": f"{hold + 5}s", "alertname": "KvmonContextFullSoon", "exp_alerts": []}]}]}
    path = tmp_path / "rules-test.yml"
    path.write_text(yaml.safe_dump(tests))
    run = subprocess.run([PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


# ------------------------------------------------------------------------------------------------ the fleet


def _monitor(sim: SimServer, source: Any) -> Monitor:
    clock = sim.clock.now
    return Monitor(source, NvmlSource(nvml=sim.nvml, clock=clock), None, Analyzer(clock=clock),
                   server_pids=sim.server_pids, clock=clock)


@needs_prometheus
def test_prometheus_scrapes_the_fleet(tmp_path: Path) -> None:
    assert PROMETHEUS is not None
    with SimServer("vllm", speed=4.0) as vllm, SimServer("spill-4090", speed=4.0) as llama:
        e = Exporter(_monitor(vllm, VllmSource(vllm.url, clock=vllm.clock.now)), interval_s=0.5, name=vllm.url,
                     devices=DevicePoller(NvmlSource(nvml=vllm.nvml), None))
        e.add_target(_monitor(llama, LlamaServerSource(llama.url, log_path=llama.log_path, clock=llama.clock.now)),
                     name=llama.url)
        host, port = e.listen("127.0.0.1", 0)
        e.start_polling()
        prom_port = _free_port()
        cfg = tmp_path / "prometheus.yml"
        cfg.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [{"job_name": "kvmon", "static_configs": [{"targets": [f"{host}:{port}"]}]}]}))
        prom = subprocess.Popen([PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        base = f"http://127.0.0.1:{prom_port}"
        try:
            def scraped() -> bool:
                try:
                    return len(_query(base, "kvmon_kv_cache_allocated_bytes")) == 2
                except OSError:
                    return False

            assert wait_until(scraped, 60), prom.stderr.read().decode() if prom.poll() is not None else "no scrape"
            up = {r["metric"]["server"]: r["value"][1] for r in _query(base, 'kvmon_up{job="kvmon"}')}
            assert up == {vllm.url: "1", llama.url: "1"}
            alloc = {r["metric"]["server"]: (r["metric"]["backend"], float(r["value"][1]))
                     for r in _query(base, "kvmon_kv_cache_allocated_bytes")}
            assert alloc[vllm.url] == ("vllm", 40960 * 36 * 2 * 8 * 128 * 2)
            assert alloc[llama.url][0] == "llama-server" and alloc[llama.url][1] > 0
            models = {r["metric"]["server"]: r["metric"]["model"] for r in _query(base, "kvmon_model_info")}
            assert models[vllm.url] == "Qwen/Qwen3-8B"
            vram = _query(base, "kvmon_gpu_vram_total_bytes")
            assert [(r["metric"]["gpu"], r["metric"]["gpu_name"]) for r in vram] == [("0", "NVIDIA GeForce RTX 4090")]
            shares = {(r["metric"]["server"], r["metric"]["gpu"]) for r in _query(base, "kvmon_gpu_weights_bytes")}
            assert shares == {(vllm.url, "0"), (llama.url, "0")}
            assert wait_until(lambda: len(_query(base, "max_over_time(kvmon_decode_tokens_per_second[5m])")) == 2,
                              60)
            with urllib.request.urlopen(f"{base}/api/v1/rules", timeout=5) as resp:
                groups = json.load(resp)["data"]["groups"]
            assert [len(g["rules"]) for g in groups] == [5] and all(g["rules"][0]["health"] == "ok" for g in groups)
            series = {r["metric"]["__name__"] for r in _query(base, '{job="kvmon",__name__=~"kvmon_.*"}')}
            assert series <= exported_names(), sorted(series - exported_names())
        finally:
            prom.terminate()
            try:
                prom.wait(timeout=15)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait(timeout=5)
            if prom.stderr is not None:
                prom.stderr.close()
            e.stop()
            e.close_monitors()


def test_serve_watches_several_urls() -> None:
    """``kvmon serve URL --url URL``: one series set per server, each with its server label."""
    with SimServer("vllm", speed=4.0) as vllm, SimServer("lmstudio") as lms:
        stop = threading.Event()
        ready: list[Exporter] = []
        args = argparse.Namespace(url=vllm.url, urls=[lms.url], api_key=None, log=None, timeout=2.0, devices=None,
                                  listen="127.0.0.1:0")
        t = threading.Thread(target=lambda: run_serve(args, stop=stop, on_ready=ready.append), daemon=True)
        t.start()
        try:
            assert wait_until(lambda: ready and all(x.store.state.polls >= 1 for x in ready[0].targets), 20)
            url = ready[0].metrics_url
            assert url is not None
            with urllib.request.urlopen(url, timeout=5) as resp:
                text = resp.read().decode()
        finally:
            stop.set()
            t.join(20)
    ups = {s.labels["server"]: (s.labels["backend"], s.value) for f in text_string_to_metric_families(text)
           for s in f.samples if s.name == "kvmon_up"}
    assert ups == {vllm.url: ("vllm", 1.0), lms.url: ("lmstudio", 1.0)}
    assert not t.is_alive()


def test_serve_refuses_the_same_server_twice() -> None:
    import io

    err = io.StringIO()
    args = argparse.Namespace(url="http://127.0.0.1:8000", urls=["http://127.0.0.1:8000/"], api_key=None, log=None,
                              timeout=1.0, devices=None, listen="127.0.0.1:0")
    assert run_serve(args, err=err) == 2 and "given twice" in err.getvalue()
