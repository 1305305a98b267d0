"""Looking without owning (issue 22, point 6): ``journaled stat`` and ``journaled.inspect_queue``
never take the directory lock (not even shared, for an instant), never create, write or touch a
file, never become the owner, and report per reader the backlog, the age of the oldest item not
yet committed and, from a live owner, open reads, delayed items and the dead-letter/expired
counts."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time

import pytest

import journaled
from journaled import JournaledQueue, QueueConfig
from journaled.cli.main import main
from journaled.inspection import NotAQueue, QueueSnapshot, inspect_queue
from support.paths import ROOT

ENV = dict(os.environ, PYTHONPATH=ROOT)


@pytest.fixture
def qpath(tmp_path):
    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(sync="always", journal_size=4096), name="q") as q:
        a = q.reader("a")
        q.reader("b")
        for i in range(1, 11):
            q.put(b"x" * i)
        for _ in range(4):
            a.commit(a.get(block=False))
    return path


def tree(path: str, live: bool = False) -> dict[str, tuple[int, int, int]]:
    """Every entry under ``path`` (the directory itself too): (mtime_ns, size, inode).  ``live``:
    beside a live owner, which renews its lease every second (disk/lease.py), leave out the lease,
    its temporary file and the directory's own mtime, which its renaming changes."""
    out = {}
    for root, dirs, files in os.walk(path):
        for name in [".", *dirs, *files]:
            if live and root == path and name in (".", ".journaled.lease", "..journaled.lease.tmp"):
                continue
            p = os.path.normpath(os.path.join(root, name))
            try:
                st = os.lstat(p)
            except FileNotFoundError:  # a checkpoint's temporary file, renamed while we looked
                out[os.path.relpath(p, path)] = (-1, -1, -1)
                continue
            out[os.path.relpath(p, path)] = (st.st_mtime_ns, st.st_size, st.st_ino)
    return out


@pytest.fixture
def no_flock(monkeypatch):
    """Every ``flock`` this process makes, recorded (and still made)."""
    calls: list[tuple[int, int]] = []
    real = fcntl.flock

    def spy(fd, op):
        calls.append((fd, op))
        return real(fd, op)

    monkeypatch.setattr(fcntl, "flock", spy)
    return calls


def test_stat_and_inspect_take_no_lock_and_change_nothing_without_an_owner(qpath, no_flock, capsys):
    before = tree(qpath)
    assert main(["stat", qpath]) == 0
    assert "(not open)" in capsys.readouterr().out
    assert main(["stat", qpath, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["owner_pid"] is None
    snap = inspect_queue(qpath)
    assert no_flock == []  # not even the shared probe of who holds the lock
    assert tree(qpath) == before
    assert snap.owner is None and snap.owner_pid is None


def test_inspect_without_an_owner_reports_backlog_bytes_and_oldest_from_the_files(qpath):
    snap = inspect_queue(qpath)
    assert isinstance(snap, QueueSnapshot) and journaled.inspect_queue is inspect_queue
    assert (snap.name, snap.first_id, snap.next_id, snap.items) == ("q", 1, 11, 10)
    a, b = snap.readers
    assert (a.name, a.head, a.backlog_items, a.backlog_bytes) == ("a", 5, 6, sum(range(5, 11)))
    assert (b.name, b.head, b.backlog_items, b.backlog_bytes) == ("b", 1, 10, sum(range(1, 11)))
    assert a.oldest_age is not None and 0 <= a.oldest_age < 60
    assert not a.live and a.open_reads is None and a.items_delayed is None
    assert (a.dead_lettered, a.expired) == (0, 0)  # from the checkpoint's counters


def test_a_reader_with_nothing_left_has_no_oldest_age(qpath):
    with JournaledQueue(qpath, name="q") as q:
        a = q.reader("a")
        for it in a.get_many(100, block=False):
            a.commit(it)
    (a, _b) = inspect_queue(qpath).readers
    assert (a.backlog_items, a.backlog_bytes, a.oldest_age) == (0, 0, None)


OWNER = """
import sys
from journaled import JournaledQueue, QueueConfig
q = JournaledQueue(sys.argv[1], QueueConfig(sync="always", checkpoint_interval=0.1), name="q")
a = q.reader("a")
held = [a.get(block=False), a.get(block=False)]   # two open reads
a.abort(a.get(block=False), delay=600)            # one delayed item
q.put(b"later", delay=600)                        # one item not yet due
print("ready", flush=True)
sys.stdin.read()
q.close()
"""


def quiet_tree(path: str) -> dict[str, tuple[int, int, int]]:
    """The tree once the owner has stopped writing (its checkpoints after the reads): the same
    for ten checkpoint intervals in a row."""
    last, since = tree(path, live=True), time.monotonic()
    while time.monotonic() - since < 1.0:
        time.sleep(0.1)
        now = tree(path, live=True)
        if now != last:
            last, since = now, time.monotonic()
    return last


def test_stat_beside_a_live_owner_in_another_process(qpath, no_flock):
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, qpath],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        assert owner.stdout.readline().strip() == "ready"
        before = quiet_tree(qpath)
        out = subprocess.run(
            [sys.executable, "-m", "journaled", "stat", qpath, "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            env=ENV,
        )
        assert out.returncode == 0, out.stderr
        st = json.loads(out.stdout)
        snap = inspect_queue(qpath)  # in this process: the flock spy sees every call
        text = subprocess.run(
            [sys.executable, "-m", "journaled", "stat", qpath],
            capture_output=True,
            text=True,
            timeout=120,
            env=ENV,
        ).stdout
        assert tree(qpath, live=True) == before  # nothing created, written or touched
        assert no_flock == []
    finally:
        owner.stdin.close()
        owner.wait(timeout=60)
    assert st["owner_pid"] == owner.pid and st["owner"]["health"]["ok"] is True
    assert st["owner"]["clients"] == []  # the stat process does not list itself
    a = {r["name"]: r for r in st["readers"]}["a"]
    assert a["live"] is True and a["open_reads"] == 2 and a["items_delayed"] == 1
    assert a["items_not_due"] == 1
    assert a["backlog_items"] == 7 and a["dead_lettered"] == 0 and a["expired"] == 0
    assert snap.owner_pid == owner.pid and snap.owner is not None and snap.owner.error is None
    ra = {r.name: r for r in snap.readers}["a"]
    assert (ra.open_reads, ra.items_delayed, ra.backlog_bytes) == (2, 1, sum(range(5, 11)) + 5)
    assert ra.items_not_due == 1
    assert (
        f"open by pid {owner.pid}" in text
        and "open reads 2, delayed 1, not yet due 1" in text
        and "figures from the live owner" in text
    )


def test_inspect_never_becomes_the_owner(qpath):
    inspect_queue(qpath)
    # had it owned the queue (or kept anything open), this open would be a client of it
    with JournaledQueue(qpath, name="q") as q:
        assert q.is_owner


@pytest.mark.parametrize("kind", ["missing", "file", "empty", "not a queue"])
def test_a_wrong_path_is_a_typed_error_and_nothing_is_created(tmp_path, kind):
    path = tmp_path / "x"
    if kind == "file":
        path.write_bytes(b"hello\n")
    elif kind != "missing":
        path.mkdir()
        if kind == "not a queue":
            (path / "app.1").write_bytes(b"a rotated log\n")
    before = sorted(os.listdir(tmp_path)), sorted(os.listdir(path)) if path.is_dir() else None
    with pytest.raises(NotAQueue) as err:
        inspect_queue(path)
    assert isinstance(err.value, journaled.JournaledError) and err.value.path == str(path)
    assert (sorted(os.listdir(tmp_path)), sorted(os.listdir(path)) if path.is_dir() else None) == before


def test_several_queues_need_a_name(tmp_path):
    d = str(tmp_path / "shared")
    for name in ("alpha", "beta"):
        with JournaledQueue(d, name=name) as q:
            q.put(b"x")
    with pytest.raises(NotAQueue, match="several queues"):
        inspect_queue(d)
    assert inspect_queue(d, "beta").name == "beta"
    with pytest.raises(NotAQueue, match="gamma"):
        inspect_queue(d, "gamma")


def test_a_damaged_checkpoint_is_reported_not_ok(qpath, capsys):
    with open(os.path.join(qpath, "q.read.b"), "r+b") as f:
        f.write(b"junk")
    b = {r.name: r for r in inspect_queue(qpath).readers}["b"]
    assert b.checkpoint_ok is False and b.head == 1
    assert main(["stat", qpath]) == 0
    assert "reader b: head 1" in capsys.readouterr().out.split("checkpoint missing or damaged")[0]


HOLDER = """
import sys
from journaled.disk.dirlock import DirLock
lock = DirLock.acquire(sys.argv[1])  # held, never served: what an offline repair does
print("ready", flush=True)
sys.stdin.read()
"""


def test_a_process_that_holds_the_directory_without_serving_it_is_named(qpath, no_flock):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, qpath],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        snap = inspect_queue(qpath)
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert no_flock == []
    assert snap.owner_pid == holder.pid  # read from /proc/locks, not by probing the lock
    assert snap.owner is not None and "does not serve it" in (snap.owner.error or "")
    assert inspect_queue(qpath).owner_pid is None  # released


def test_inspect_without_an_owner_reports_the_checkpointed_policy_counters(tmp_path) -> None:
    qpath = str(tmp_path / "counted")
    with JournaledQueue(qpath) as q:
        r = q.reader("r", journaled.ReaderConfig(max_errors=1))
        q.put_many([b"a", b"b", b"c"])
        r.abort(r.get(block=False))  # its first failure reaches max_errors: dead-lettered
        r.commit(r.get(block=False))
    (snap,) = inspect_queue(qpath).readers
    assert not snap.live and (snap.dead_lettered, snap.expired, snap.head) == (1, 0, 3)
