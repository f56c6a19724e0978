"""The CPU path end to end against the real llama.cpp server (b11549, CPU build, from the xllamacpp wheel): with no
GPU on the machine, host RAM is the device, its bandwidth is measured once while nothing decodes, and the dashboard
shows a ceiling, an efficiency and the host memory bar — where it used to show "— ceiling"."""

from __future__ import annotations

import contextlib
import io
import json
import time
from collections.abc import Callable

import pytest
from real_llama_server import KVMON_TIMEOUT_S, RealLlamaServer, TimedReply

from kvmon.app.build import open_monitor
from kvmon.cli import main as kvmon_main
from kvmon.core.snapshot import Snapshot

FLAGS = ["-c", "32768", "-np", "1", "--metrics"]
# a reply that lasts until the test leaves it (the server stops when the stream is closed), however slow the machine
LONG_REPLY = {"prompt": "hello world", "n_predict": 32000, "ignore_eos": True}


def _decoding_snapshot(m: object, reply: TimedReply, deadline_s: float = 60.0) -> Snapshot:
    """A poll that has a decode speed and an efficiency, while the reply generates."""
    reply.wait_tokens(50)
    end = time.monotonic() + deadline_s
    snap = m.poll()  # type: ignore[attr-defined]
    while time.monotonic() < end and (snap.decode_tok_s is None or snap.efficiency is None):
        time.sleep(0.5)
        snap = m.poll()  # type: ignore[attr-defined]
    assert not reply.done.is_set(), "the reply ended while kvmon read it"
    return snap


def test_cpu_only_server_gets_a_ceiling_an_efficiency_and_the_host_bar(
        llama_server: Callable[..., RealLlamaServer], qtbot, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # a machine kvmon has not measured yet
    server = llama_server("llama", FLAGS)
    with open_monitor(server.url, log_path=str(server.log_path), timeout_s=KVMON_TIMEOUT_S) as m:
        idle = m.poll()  # every slot idle: the one-time host bandwidth probe runs now
        assert m.probes_run == 1, idle.host.reasons
        assert idle.host.host_bandwidth_source == "measured" and idle.host.host_bandwidth_measured_at_unix_s
        assert idle.extra["placement"] == "host_only"  # the log: CPU_Mapped model buffer, CPU KV buffer
        assert idle.ceiling_curve  # no context yet: the ceiling at every depth
        with TimedReply(server.url, LONG_REPLY) as reply:
            s = _decoding_snapshot(m, reply)
    assert s.decode_tok_s is not None and s.ceiling_tok_s is not None and s.efficiency is not None
    assert 0.0 < s.efficiency < 1.5, (s.decode_tok_s, s.ceiling_tok_s)
    assert s.host.in_ceiling and s.host.weights_in_host_bytes and s.host.kv_in_host_bytes
    assert s.host.achieved_bandwidth_bytes_per_s is not None
    assert m.probes_run == 1  # not again, and never while the slot decoded
    assert any(a.code == "cpu_only" for a in s.alerts)
    assert not any(a.code in ("kv_in_host", "weights_in_host") for a in s.alerts)  # nothing spilled: it runs there

    from kvmon.gui.panels.bandwidth import BandwidthPanel
    from kvmon.gui.panels.header import HeaderPanel
    from kvmon.gui.panels.memory import MemoryPanel

    memory, bandwidth, header = MemoryPanel(), BandwidthPanel(), HeaderPanel()
    for w in (memory, bandwidth, header):
        qtbot.addWidget(w)
        w.update_snapshot(s)
    assert [b.label for b in memory.bars.bars][-1] == "Host" and "weights + KV" in memory.bars.bars[-1].note
    host_bw = bandwidth.bars.bars[-1]
    assert host_bw.label == "Host" and "measured" in host_bw.note and host_bw.segments
    assert "ceiling" in header.efficiency.whole() and "— ceiling" not in header.efficiency.whole()


def test_once_json_on_the_cpu_server_has_a_ceiling(llama_server: Callable[..., RealLlamaServer]) -> None:
    server = llama_server("llama", FLAGS)
    out, err = io.StringIO(), io.StringIO()
    with TimedReply(server.url, LONG_REPLY) as reply:
        reply.wait_tokens(50)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = kvmon_main(["once", server.url, "--log", str(server.log_path), "--json", "--interval", "1",
                             "--timeout", f"{KVMON_TIMEOUT_S:g}", "--bandwidth", "host=40"])
    assert rc == 0, err.getvalue()
    doc = json.loads(out.getvalue())
    assert doc["ceiling_tok_s"] is not None and doc["host"]["host_bandwidth_source"] == "user"
    assert doc["host"]["host_bandwidth_bytes_per_s"] == pytest.approx(40e9) and doc["host"]["in_ceiling"] is True
    host = doc["devices"][-1]
    assert host["id"] == "host" and host["kind"] == "host_ram" and host["in_ceiling"] is True
    assert doc["provenance"]["ceiling_tok_s"] == "computed"
