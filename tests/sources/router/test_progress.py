"""A router's load progress over a real event stream on 127.0.0.1: events are kept per model, and a stream that
sends an endless line is let go with the reason, keeping what came before it."""

from __future__ import annotations

import json
import socket
import threading
import time

from helpers_hostile import RawServer, drip_head, read_request_head
from helpers_http import wait_until

from kvmon.sources.router.progress import MAX_LINE_BYTES, ProgressStream

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _event(model: str, value: float) -> bytes:
    doc = {"model": model, "event": "status_change", "data": {"status": "loading", "progress": {"value": value}}}
    return f"data: {json.dumps(doc)}\n\n".encode()


def test_events_are_kept_per_model_as_they_come_split_anywhere() -> None:
    def stream(sock: socket.socket, stopped: threading.Event) -> None:
        read_request_head(sock)
        sock.sendall(HEAD)
        data = _event("a", 0.25) + _event("b", 0.5) + b": a comment\n\n" + _event("a", 0.75)
        for i in range(0, len(data), 7):  # the lines cut across chunks
            sock.sendall(_chunk(data[i:i + 7]))
        stopped.wait()

    with RawServer(stream) as server:
        follower = ProgressStream(server.url + "/models/sse", timeout_s=2.0)
        follower.want(True)
        try:
            assert wait_until(lambda: follower.latest().get("a", (0, {}))[1].get("data", {}).get("progress")
                              == {"value": 0.75}, 5.0)
            assert set(follower.latest()) == {"a", "b"} and follower.connected and follower.error is None
        finally:
            follower.close()


def test_an_endless_line_ends_the_stream_with_the_reason_and_keeps_the_events_before_it() -> None:
    def endless(sock: socket.socket, stopped: threading.Event) -> None:
        read_request_head(sock)
        sock.sendall(HEAD + _chunk(_event("a", 0.5)) + _chunk(b"data: "))
        piece = _chunk(b"9" * 65536)
        while not stopped.is_set():
            try:
                sock.sendall(piece)
            except OSError:
                return

    with RawServer(endless) as server:
        follower = ProgressStream(server.url + "/models/sse", timeout_s=2.0)
        follower.want(True)
        try:
            assert wait_until(lambda: follower.error is not None, 10.0)
            assert follower.error == f"sent an event longer than {MAX_LINE_BYTES // 1024} KiB"
            assert "a" in follower.latest()
        finally:
            t0 = time.monotonic()
            follower.close()
            assert time.monotonic() - t0 < 1.0


def test_a_head_dripped_past_the_timeout_is_cut_off_and_said() -> None:
    with RawServer(drip_head(0.05)) as server:
        follower = ProgressStream(server.url + "/models/sse", timeout_s=0.5)
        follower.want(True)
        try:
            assert wait_until(lambda: follower.error is not None, 3.0)
            assert follower.error == "sent no answer in 0.5 s" and not follower.connected
        finally:
            follower.close()
