"""``kvmon serve`` on a server that dies behind its gateway: every path answering 502 (or an HTML page, an empty
body, a redirect...) is a server down, not a connected one with nothing to say: ``kvmon_up`` 0 with the reason,
the connection alert's series, the poll errors counted, and the shipped ``KvmonServerUnreachable`` rule firing on
exactly those series."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from hostile_matrix import FAILURES, HostileServer, llama_routes
from prometheus_client.parser import text_string_to_metric_families

from kvmon.app.build import open_monitor
from kvmon.cli.serve import Exporter

Samples = dict[str, list[tuple[dict[str, str], float]]]


def _samples(text: str) -> Samples:
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def _scrape_dead_server(failure: str) -> tuple[Samples, str]:
    """Read the llama-server double while it answers, then make every path answer ``failure`` and poll for 4 s
    (past the connection alert's 3 s): the exporter's samples and its text."""
    with HostileServer(llama_routes()) as llama:
        monitor = open_monitor(llama.url, timeout_s=1.0, gpu=False, host=False)
        e = Exporter(monitor, interval_s=0.2)
        e.listen("127.0.0.1", 0)
        try:
            e.poll_once()
            e.poll_once()
            assert e.metrics_url is not None
            assert _samples(httpx.get(e.metrics_url, timeout=5).text)["kvmon_up"][0][1] == 1
            llama.every = FAILURES[failure]
            end = time.monotonic() + 4.0
            while time.monotonic() < end:
                e.poll_once()
                time.sleep(0.2)
            text = httpx.get(e.metrics_url, timeout=5).text
        finally:
            e.stop()
            monitor.close()
    return _samples(text), text


@pytest.mark.parametrize("failure", list(FAILURES))
def test_a_server_whose_every_path_fails_is_down_with_its_alert_and_its_errors(failure: str) -> None:
    m, _ = _scrape_dead_server(failure)
    (labels, up), = m["kvmon_up"]
    assert up == 0 and labels["status"] == "bad_response", m["kvmon_up"]
    assert "kvmon_decode_tokens_per_second" not in m and "kvmon_model_info" not in m  # nothing stale
    alerts = {(a["level"], a["code"]) for a, v in m.get("kvmon_alerts_active", []) if v > 0}
    assert ("warning", "connection") in alerts, alerts
    assert m["kvmon_exporter_poll_errors_total"][0][1] >= 10  # every failed poll counted


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (Debian's prometheus package)")
def test_the_shipped_unreachable_rule_fires_on_the_series_of_a_dead_server(tmp_path: Path) -> None:
    m, _ = _scrape_dead_server("502")
    (labels, value), = [(a, v) for a, v in m["kvmon_alerts_active"] if a["code"] == "connection"]
    series = "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + ',instance="gpu-box:9464"}'
    rules = subprocess.run([sys.executable, "-m", "kvmon", "--print-path", "prometheus-rules"], capture_output=True,
                           text=True, timeout=60, check=True).stdout.strip()  # the file kvmon ships
    (tmp_path / "test.yml").write_text(f"""
rule_files: ["{rules}"]
evaluation_interval: 5s
tests:
  - interval: 5s
    input_series:
      - series: 'kvmon_alerts_active{series}'
        values: '{value:g}x12'
    alert_rule_test:
      - eval_time: 30s
        alertname: KvmonServerUnreachable
        exp_alerts:
          - exp_labels: {{severity: warning, instance: "gpu-box:9464", server: "{labels['server']}"}}
            exp_annotations:
              summary: "kvmon cannot read {labels['server']}"
              description: "kvmon serve on gpu-box:9464 has not read {labels['server']} for a while (kvmon_up is 0;
                its status label says why)."
""")
    out = subprocess.run(["promtool", "test", "rules", str(tmp_path / "test.yml")], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
