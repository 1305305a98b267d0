"""Durable reader settings across processes (docs/design.md, "Durable settings"): the README's
job-queue recipe, with the producer that set the reader's policies gone -- exited normally, or
killed with SIGKILL -- before a worker, the queue's next owner, runs the reader *without* a
config.  The poison job must reach the dead-letter queue after ``max_errors`` aborts, each retry
after ``retry_delay``; every other job is done.  Real processes, real ``kill -9``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import pytest

from journaled import DeadLetter, Empty, JournaledQueue
from journaled.disk.settingsfile import load_settings, settings_path

TIMEOUT = 120
JOBS = 5

PRODUCER = """
import sys
from journaled import JournaledQueue, ReaderConfig
qdir, deaddir, mode = sys.argv[1:4]
dead = JournaledQueue(deaddir)
q = JournaledQueue(qdir)
q.reader("workers", ReaderConfig(max_errors=2, retry_delay=0.05, dead_letter=dead))
q.put(b"job-0")
q.put(b"poison")
q.put_many([f"job-{i}".encode() for i in range(1, %(jobs)d)])
q.sync()
if mode != "exit":
    print("ready", flush=True)
    sys.stdin.readline()  # killed here, owner of both queues, or told to close
if mode != "kill":
    q.close()
    dead.close()
"""

WORKER = """
import json, sys, time
from journaled import Empty, JournaledQueue, OwnerLost
qdir, role = sys.argv[1:3]
q = JournaledQueue(qdir)
assert q.is_owner == (role == "owner")
r = q.reader("workers")  # no config: the stored one applies
if role == "client":  # takes the queue over once its owner is gone
    print("client", flush=True)
    sys.stdin.readline()
done, poison_at = [], []
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    st = [s for s in q.stats().readers if s.name == "workers"][0]
    if len(done) == %(jobs)d and st.dead_lettered == 1:
        break
    try:
        item = r.get(timeout=0.2)
    except (Empty, OwnerLost):
        continue
    if item.data == b"poison":
        poison_at.append(time.monotonic())
        r.abort(item)
    else:
        done.append(item.data.decode())
        r.commit(item)
out = {"done": sorted(done), "poison_at": poison_at}
if role != "served":  # the reader as the owner runs it (a client owns it through _local after taking over)
    assert q.is_owner
    cfg = (q if role == "owner" else q._route._local)._readers["workers"].config
    out.update(max_errors=cfg.max_errors, retry_delay=cfg.retry_delay, dead_letter=cfg.dead_letter.path)
q.close()
print(json.dumps(out), flush=True)
"""


def _code(template: str) -> str:
    return textwrap.dedent(template) % {"jobs": JOBS}


def _worker(qdir: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", _code(WORKER), qdir, "owner"], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _check(result: dict[str, object], qdir: str, deaddir: str) -> None:
    if "max_errors" in result:  # what the owner ran
        assert (result["max_errors"], result["retry_delay"], result["dead_letter"]) == (2, 0.05, deaddir)
    stored = load_settings(settings_path(qdir, "jobs")).readers["workers"]  # the same after as before
    assert (stored["max_errors"], stored["retry_delay"], stored["dead_letter"]) == (
        2,
        0.05,
        {"queue": "../dead"},
    )
    assert result["done"] == sorted(f"job-{i}" for i in range(JOBS))
    at = result["poison_at"]
    assert isinstance(at, list) and len(at) == 2  # two errors, then the dead-letter queue: no hot loop
    assert at[1] - at[0] >= 0.05 * 0.9  # the stored retry_delay applied
    with JournaledQueue(deaddir) as dead:
        check, letters = dead.reader("check"), []
        while True:
            try:
                letters.append(DeadLetter.decode(check.get(timeout=0.5).data))
            except Empty:
                break
    assert [(d.data, d.kind) for d in letters] == [(b"poison", "max_errors")]


def test_settings_outlive_a_producer_that_exits_normally(tmp_path) -> None:
    qdir, deaddir = str(tmp_path / "jobs"), str(tmp_path / "dead")
    subprocess.run(
        [sys.executable, "-c", _code(PRODUCER), qdir, deaddir, "exit"], check=True, timeout=TIMEOUT
    )
    _check(_worker(qdir), qdir, deaddir)


def test_settings_outlive_a_producer_killed_with_sigkill(tmp_path) -> None:
    qdir, deaddir = str(tmp_path / "jobs"), str(tmp_path / "dead")
    producer = subprocess.Popen(
        [sys.executable, "-c", _code(PRODUCER), qdir, deaddir, "kill"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert producer.stdout is not None
        assert producer.stdout.readline().strip() == "ready"
    finally:
        producer.send_signal(signal.SIGKILL)
        producer.wait(timeout=TIMEOUT)
    assert producer.returncode == -signal.SIGKILL
    _check(_worker(qdir), qdir, deaddir)


@pytest.mark.parametrize("how", ["close", "kill"])
def test_a_client_taking_over_applies_the_stored_settings(tmp_path, how) -> None:
    """The worker is a client of the producer when the producer closes (or is killed): it takes
    the queue over through the same open path, and runs the reader as the producer set it."""
    qdir, deaddir = str(tmp_path / "jobs"), str(tmp_path / "dead")
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
    producer = subprocess.Popen([sys.executable, "-c", _code(PRODUCER), qdir, deaddir, how], **pipes)  # type: ignore[call-overload]
    worker = None
    try:
        assert producer.stdout.readline().strip() == "ready"
        worker = subprocess.Popen([sys.executable, "-c", _code(WORKER), qdir, "client"], **pipes)  # type: ignore[call-overload]
        assert worker.stdout.readline().strip() == "client"
        if how == "kill":
            producer.send_signal(signal.SIGKILL)
        else:
            producer.stdin.write("close\n")
            producer.stdin.flush()
        producer.wait(timeout=TIMEOUT)
        assert producer.returncode == (-signal.SIGKILL if how == "kill" else 0)
        out, _ = worker.communicate("go\n", timeout=TIMEOUT)
        assert worker.returncode == 0
    finally:
        for proc in (producer, worker):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=TIMEOUT)
    _check(json.loads(out.strip().splitlines()[-1]), qdir, deaddir)


def test_journaled_serve_applies_the_stored_settings(tmp_path) -> None:
    """The producer exits; ``journaled serve`` owns the queue (and opens the dead-letter queue by
    its stored path); a worker, its client, runs the reader without a config."""
    qdir, deaddir = str(tmp_path / "jobs"), str(tmp_path / "dead")
    subprocess.run(
        [sys.executable, "-c", _code(PRODUCER), qdir, deaddir, "exit"], check=True, timeout=TIMEOUT
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "journaled", "serve", qdir], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None and server.stdout.readline().startswith("serving")
        out = subprocess.run(
            [sys.executable, "-c", _code(WORKER), qdir, "served"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert out.returncode == 0, out.stderr[-3000:]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=TIMEOUT)
    assert server.returncode == 0
    _check(json.loads(out.stdout.strip().splitlines()[-1]), qdir, deaddir)
