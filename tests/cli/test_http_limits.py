"""The limits of what listens on a port (cli/httpserver.py; issue 35, points 1, 2 and 10): the
request line and headers have a deadline (an idle keep-alive connection too), a request has a
size bound and no body, connections are bounded (the one waiting longest for its next request
makes room), and a client that goes away mid-answer leaves no traceback.  Each is checked on
the status page and on ``serve --metrics``'s server."""

from __future__ import annotations

import socket
import threading
import time

import pytest

import journaled.cli.httpserver as http
from journaled import JournaledQueue
from journaled.cli.httpserver import BoundedHTTPServer, Request, Response
from journaled.cli.serve import start_metrics
from journaled.cli.statuspage import StatusServer

DEADLINE = 0.5


@pytest.fixture(params=["status page", "metrics"])
def port(request, tmp_path, monkeypatch):
    monkeypatch.setattr(http, "HEADER_TIMEOUT", DEADLINE)
    if request.param == "metrics":
        pytest.importorskip("prometheus_client")
        with JournaledQueue(str(tmp_path / "jobs")) as q:
            server, collector, _url = start_metrics("127.0.0.1", 0)
            collector.add(q)
            yield server.port
            server.close()
    else:
        with JournaledQueue(str(tmp_path / "jobs")) as q:
            page = StatusServer([q], token=None)
            yield page.port
            page.close()


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    return s


def _closed_within(s: socket.socket, seconds: float, drip: bytes = b"") -> float | None:
    """Seconds until the server closed ``s`` (sending ``drip`` every 0.1 s meanwhile), or None."""
    start = time.monotonic()
    s.settimeout(0.1)
    while time.monotonic() - start < seconds:
        try:
            if drip:
                s.send(drip)
            if s.recv(65536) == b"":
                return time.monotonic() - start
        except socket.timeout:
            continue
        except OSError:  # reset: closed too
            return time.monotonic() - start
    return None


def _get(s: socket.socket, path: str = "/metrics") -> bytes:
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    s.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += s.recv(65536)
    return head


def test_headers_that_do_not_arrive_in_time_end_the_connection(port) -> None:
    s = _connect(port)
    s.sendall(b"GET / HTTP/1.1\r\n")
    took = _closed_within(s, 5.0, drip=b"X")  # slowloris: a byte every 0.1 s
    s.close()
    assert took is not None and took < DEADLINE + 1.0, f"still open after {took or 5.0:.1f} s"


def test_an_idle_keep_alive_connection_is_closed_at_the_same_deadline(port) -> None:
    s = _connect(port)
    assert _get(s).startswith(b"HTTP/1.1 ")
    took = _closed_within(s, 5.0)
    s.close()
    assert took is not None and took < DEADLINE + 1.0, f"still open after {took or 5.0:.1f} s"


def test_a_request_over_the_size_bound_is_refused(port) -> None:
    s = _connect(port)
    s.sendall(b"GET / HTTP/1.1\r\n" + b"X-Big: " + b"a" * (http.MAX_REQUEST + 10) + b"\r\n\r\n")
    s.settimeout(10)
    assert s.recv(100).startswith(b"HTTP/1.1 431 ")
    s.close()


def test_a_request_with_a_body_is_refused(port) -> None:
    s = _connect(port)
    s.sendall(b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello")
    s.settimeout(10)
    assert s.recv(100).split(b" ")[1] in (b"405", b"413")
    s.close()


def test_connections_beyond_the_bound_push_out_the_one_waiting_longest(tmp_path) -> None:
    server = BoundedHTTPServer("127.0.0.1", 0, lambda req: Response(200, b"ok"), "test", max_connections=4)
    try:
        idle = [_connect(server.port) for _ in range(4)]
        time.sleep(0.2)
        fresh = _connect(server.port)
        assert _get(fresh, "/").startswith(b"HTTP/1.1 200 ")
        assert _closed_within(idle[0], 2.0) is not None  # the oldest made room
        assert all(_closed_within(s, 0.3) is None for s in idle[1:])
        assert server.counts["pushed_out"] == 1
    finally:
        server.close()
    for s in [*idle, fresh]:
        s.close()


def test_a_client_gone_mid_answer_leaves_no_traceback_and_the_server_goes_on(caplog) -> None:
    started = threading.Event()

    def slow_big(req: Request) -> Response:
        started.set()
        time.sleep(0.2)
        return Response(200, b"x" * (8 << 20))

    server = BoundedHTTPServer("127.0.0.1", 0, slow_big, "test")
    try:
        s = _connect(server.port)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.sendall(b"GET / HTTP/1.1\r\n\r\n")
        assert started.wait(10)
        s.recv(1000)
        s.close()  # with linger 0: a reset while the answer is being sent
        time.sleep(0.5)
        again = _connect(server.port)
        assert _get(again, "/").startswith(b"HTTP/1.1 200 ")
        again.close()
    finally:
        server.close()
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]
