"""A server's text is data, never control: a model name carrying escape sequences, a newline, a C1 control or a
bidirectional override reaches ``kvmon once`` (text and ``--json``) and ``kvmon serve``'s labels as plain, visible
text, by every route a name comes in: llama-server's alias, Ollama's ``/api/ps``, a GGUF's ``general.name``, a vLLM
label, a server's error message and a server's log."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gguf
import httpx
import pytest
from hostile_matrix import Answer, HostileServer, _json, llama_routes, no_proxy, ollama_routes, vllm_routes

from kvmon.app.build import open_monitor
from kvmon.cli import build_parser
from kvmon.cli.once import run as run_once
from kvmon.cli.serve import Exporter
from kvmon.sources.llamacpp.log import LogFollower

HOSTILE = "\x1b]0;PWNED\x07\x1b[31mRED\x1b[2J\nforged line\u009b31m \u202eevil"
SHOWN = "^[]0;PWNED^G^[[31mRED^[[2J^Jforged line\ufffd31m evil"


def _controls(text: str) -> list[str]:
    """The characters no terminal, label or window may get raw: C0 (but the newlines between lines), C1, bidi."""
    bad = {c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) < 0xA0
           or c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c\u2028\u2029"}
    return sorted(ascii(c) for c in bad)


def _once(url: str, *extra: str) -> tuple[int, str, dict[str, Any], str]:
    """``kvmon once URL`` as text and as ``--json``: (exit status, text, document, stderr)."""
    outs: list[str] = []
    err = io.StringIO()
    rc = 0
    for json_flag in ((), ("--json",)):
        out = io.StringIO()
        args = build_parser().parse_args(["once", url, "--timeout", "1", "--interval", "0.2", *json_flag, *extra])
        with no_proxy():
            rc = max(rc, run_once(args, out, err))
        outs.append(out.getvalue())
    return rc, outs[0], json.loads(outs[1]) if outs[1] else {}, err.getvalue()


def _scrape(url: str) -> str:
    monitor = open_monitor(url, timeout_s=1.0, gpu=False, host=False)
    exporter = Exporter(monitor, interval_s=0.2)
    exporter.listen("127.0.0.1", 0)
    try:
        exporter.poll_once()
        exporter.poll_once()
        assert exporter.metrics_url is not None
        return httpx.get(exporter.metrics_url, timeout=5).text
    finally:
        exporter.stop()
        monitor.close()


@pytest.fixture
def llama_alias() -> Iterator[HostileServer]:
    routes = llama_routes()
    props = json.loads(routes["/props"].body)
    props["model_alias"] = HOSTILE
    routes["/props"] = _json(props)
    with HostileServer(routes) as server:
        yield server


def test_a_llama_server_alias_is_plain_in_once_and_in_the_exporters_labels(llama_alias: HostileServer) -> None:
    rc, text, doc, err = _once(llama_alias.url)
    assert rc == 0, err
    assert doc["model"]["name"] == SHOWN
    assert SHOWN in text and not _controls(text) and not _controls(json.dumps(doc, ensure_ascii=False))
    assert len(text.splitlines()) == len(text.replace(SHOWN, "name").splitlines())  # no line forged
    scraped = _scrape(llama_alias.url)
    assert f'model="{SHOWN}"' in scraped and not _controls(scraped)


def test_an_ollama_model_name_from_api_ps_is_plain() -> None:
    routes = ollama_routes("sha256-" + "ab" * 32)
    ps = json.loads(routes["/api/ps"].body)
    ps["models"][0]["name"] = ps["models"][0]["model"] = HOSTILE
    routes["/api/ps"] = _json(ps)
    with HostileServer(routes) as server:
        rc, text, doc, err = _once(server.url)
    assert rc == 0, err
    assert doc["model"]["name"] == SHOWN and not _controls(text) and not _controls(json.dumps(doc, ensure_ascii=False))


def test_a_ggufs_general_name_is_plain(tmp_path: Path) -> None:
    path = tmp_path / "hostile.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(HOSTILE)
    w.add_block_count(1)
    w.add_context_length(4096)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    routes = llama_routes()
    props = json.loads(routes["/props"].body)
    props["model_path"] = props["model_alias"] = str(path)  # no alias of its own: the file's name is shown
    routes["/props"] = _json(props)
    routes["/v1/models"] = _json({"object": "list", "data": []})
    with HostileServer(routes) as server:
        rc, text, doc, err = _once(server.url)
    assert rc == 0, err
    assert doc["model"]["name"] == SHOWN and not _controls(text)


def test_a_vllm_model_name_is_plain() -> None:
    routes = vllm_routes()
    page = routes["/metrics"].body.decode()
    models = json.loads(routes["/v1/models"].body)
    name = models["data"][0]["id"]
    models["data"][0]["id"] = models["data"][0]["root"] = HOSTILE
    label = HOSTILE.replace("\n", "\\n")  # a newline, as a label value carries it
    routes["/metrics"] = Answer(200, page.replace(f'model_name="{name}"', f'model_name="{label}"').encode(),
                                routes["/metrics"].headers)
    routes["/v1/models"] = _json(models)
    with HostileServer(routes) as server:
        rc, text, doc, err = _once(server.url)
    assert rc == 0, err
    assert doc["model"]["name"] == SHOWN
    assert not _controls(text) and not _controls(json.dumps(doc, ensure_ascii=False)), text


def test_a_servers_error_message_is_one_plain_line_on_stderr() -> None:
    with HostileServer({}) as server:
        server.every = Answer(500, json.dumps({"error": {"code": 500, "message": HOSTILE}}).encode())
        rc, _text, _doc, err = _once(server.url)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 2 and "PWNED" in err and not _controls(err), err  # one line per run of once, each plain


def test_a_device_named_by_the_servers_log_is_plain(tmp_path: Path) -> None:
    log = tmp_path / "llama-server.log"
    log.write_text("ggml_cuda_init: found 1 CUDA devices:\n"
                   f"  Device 0: {HOSTILE.replace(chr(10), ' ')}, compute capability 8.9, VMM: yes\n",
                   encoding="utf-8")
    devices = LogFollower(str(log)).poll().devices
    assert [d.description for d in devices] == [SHOWN.replace("^J", " ")]
