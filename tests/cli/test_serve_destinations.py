"""``journaled serve`` and the queues its queues write to: a queue that is a reader's dead-letter
queue of another served queue is served through the instance that already owns it, and the
paths after it are served too (issue 34, point 8); two served queues of one name are refused
before anything is owned, with or without ``--metrics`` (issue 35, point 10)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading

from journaled import JournaledQueue, ReaderConfig
from support.paths import ROOT

ENV = dict(os.environ, PYTHONPATH=ROOT)
TIMEOUT = 60


def _lines(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    out: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.put(line.strip())

    threading.Thread(target=pump, daemon=True).start()
    return out


def test_a_dead_letter_queue_of_a_served_queue_is_served_and_so_are_the_paths_after_it(tmp_path) -> None:
    jobs, dead, other = (str(tmp_path / n) for n in ("jobs", "dead", "other"))
    with JournaledQueue(dead) as d, JournaledQueue(jobs) as q:
        q.reader("workers", ReaderConfig(max_errors=1, dead_letter=d))
    with JournaledQueue(other):
        pass
    proc = subprocess.Popen(
        [sys.executable, "-m", "journaled", "serve", jobs, dead, other],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        lines = _lines(proc)
        served = []
        for _ in range(3):
            try:
                served.append(lines.get(timeout=15))
            except queue.Empty:
                break
        assert served == [f"serving {p} (pid {proc.pid})" for p in (jobs, dead, other)], served
        for path in (dead, other):  # both answer clients
            with JournaledQueue(path) as client:
                assert not client.is_owner
                client.put(b"hello")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=TIMEOUT) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.stderr is not None and "Traceback" not in proc.stderr.read()


def test_two_queues_of_one_name_are_refused_before_anything_is_owned(tmp_path) -> None:
    a, b = str(tmp_path / "one" / "q"), str(tmp_path / "two" / "q")
    for d in (a, b):
        with JournaledQueue(d) as q:
            q.put(b"x")
    for extra in (["--http", "127.0.0.1:0"], []):
        out = subprocess.run(
            [sys.executable, "-m", "journaled", "serve", *extra, a, b],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=ENV,
        )
        assert out.returncode == 2 and "Traceback" not in out.stderr, (extra, out.returncode, out.stderr)
        assert out.stderr.count("\n") == 1 and "named 'q'" in out.stderr, out.stderr


def test_one_path_given_twice_is_refused(tmp_path) -> None:
    a = str(tmp_path / "q")
    with JournaledQueue(a):
        pass
    out = subprocess.run(
        [sys.executable, "-m", "journaled", "serve", a, a + "/"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=ENV,
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
