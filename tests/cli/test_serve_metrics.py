"""``journaled serve PATH... --metrics HOST:PORT`` serves Prometheus metrics of the queues it owns
at ``/metrics``; the URL, with the port chosen for port 0, is its first line; an address in use
is refused before anything is owned (one line, exit 2) (issue 24, point 1)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

from journaled import JournaledQueue
from support.paths import ROOT

pytest.importorskip("prometheus_client")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

ENV = dict(os.environ, PYTHONPATH=ROOT)
TIMEOUT = 120


def serve(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "journaled", "serve", *args], stdout=subprocess.PIPE, text=True, env=ENV
    )


def stop(server: subprocess.Popen[str]) -> None:
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
    try:
        assert server.wait(timeout=TIMEOUT) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=TIMEOUT) as reply:
        assert reply.status == 200
        text = reply.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_serve_prints_the_metrics_url_and_serves_the_owned_queues_figures(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    server = serve("--create", "--metrics", "127.0.0.1:0", a, b)
    try:
        assert server.stdout is not None
        first = server.stdout.readline().strip()
        assert first.startswith("metrics at http://127.0.0.1:") and first.endswith("/metrics")
        url = first.removeprefix("metrics at ")
        assert int(url.rsplit(":", 1)[1].split("/")[0]) > 0  # the port the system chose
        assert server.stdout.readline().startswith(f"serving {a} ")
        assert server.stdout.readline().startswith(f"serving {b} ")
        with JournaledQueue(a) as q:  # a client of the serving process
            assert not q.is_owner
            r = q.reader("workers")
            q.put_many([b"job"] * 4)
            r.commit(r.get(timeout=TIMEOUT))
            held = r.get(timeout=TIMEOUT)
            samples = scrape(url)
            st = q.stats()
            workers = (("queue", "a"), ("reader", "workers"))
            assert samples[("journaled_queue_put_items_total", (("queue", "a"),))] == st.put == 4
            assert samples[("journaled_queue_put_items_total", (("queue", "b"),))] == 0
            assert samples[("journaled_queue_owned", (("queue", "a"),))] == 1  # the server owns it
            assert samples[("journaled_queue_clients", (("queue", "a"),))] == len(st.clients) == 1
            assert samples[("journaled_reader_backlog_items", workers)] == st.readers[0].backlog_items == 3
            assert samples[("journaled_reader_open_reads", workers)] == 1
            assert samples[("journaled_reader_committed_items_total", workers)] == 1
            assert samples[("process_open_fds", ())] > 0  # the process's own metrics beside them
            r.commit(held)
    finally:
        stop(server)


def test_an_address_in_use_is_one_line_and_exit_2_with_nothing_owned(tmp_path):
    d = str(tmp_path / "q")
    with JournaledQueue(d) as q:
        q.put(b"x")
    taken = socket.socket()
    try:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run(
            [sys.executable, "-m", "journaled", "serve", "--metrics", f"127.0.0.1:{port}", d],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=ENV,
        )
    finally:
        taken.close()
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stdout == "" and "Traceback" not in out.stderr
    assert out.stderr.startswith("journaled serve: --metrics 127.0.0.1:") and out.stderr.count("\n") == 1
    assert "cannot listen there" in out.stderr
    with JournaledQueue(d) as q:  # nobody took it
        assert q.is_owner


def test_a_path_that_is_not_a_queue_is_refused_before_listening(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    (d / "app.1").write_bytes(b"a log\n")
    out = subprocess.run(
        [sys.executable, "-m", "journaled", "serve", "--metrics", "127.0.0.1:0", str(d)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=ENV,
    )
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1 and "holds no journaled queue" in out.stderr


def test_two_served_queues_of_one_name_are_refused_with_metrics(tmp_path):
    a, b = str(tmp_path / "one" / "q"), str(tmp_path / "two" / "q")
    for d in (a, b):
        os.makedirs(d)
    out = subprocess.run(
        [sys.executable, "-m", "journaled", "serve", "--metrics", "127.0.0.1:0", a, b],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=ENV,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.count("\n") == 1 and "named 'q'" in out.stderr


@pytest.mark.parametrize("bad", ["9100", "host:port", "127.0.0.1:70000"])
def test_a_malformed_address_is_a_usage_error(tmp_path, bad):
    out = subprocess.run(
        [sys.executable, "-m", "journaled", "serve", "--metrics", bad, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=ENV,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "not HOST:PORT" in out.stderr and os.listdir(tmp_path) == []
