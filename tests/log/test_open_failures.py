"""A failed ``open`` never poisons the queue: it loses nothing (docs/design.md, "I/O errors").

A connection flood can take every descriptor of the owning process; the journal file a rotation
needs next, or one a read-behind refill reads, then cannot be opened (EMFILE).  The put that
needed the file is refused with nothing of it written, and everything works again once
descriptors are free.  The faults come from ``FailingOpens`` (tests/support/faults.py) and, once,
from a real ``RLIMIT_NOFILE`` lowered in a child process.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ready_items
from journaled import JournaledQueue, JournalIOError, QueueConfig, ReaderConfig, spool_put
from journaled.disk import fileio
from support.faults import FailingOpens, journal_file_read, new_journal_file
from support.paths import ROOT

SMALL = QueueConfig(sync="always", journal_size=4096, checkpoint_interval=3600.0)


def _journal_files(path: str) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.startswith("q.") and n[2:].isdigit())


def _drain(path: str, config: QueueConfig = SMALL) -> list[bytes]:
    with JournaledQueue(path, config, name="q") as q:
        r = q.reader("check", ReaderConfig(start="earliest"))
        return [it.data for it in ready_items(r)]


def _fill_first_file(q: JournaledQueue) -> list[bytes]:
    """Put until the next 1000-byte item needs a new file; return what was put."""
    put = []
    while True:
        before = len(q.journal.files)
        data = b"a%03d" % len(put) + b"." * 996
        with fileio.use(FailingOpens(new_journal_file("q"))) as probe:
            try:
                q.put(data)
            except JournalIOError:
                assert probe.failed == 1 and len(q.journal.files) == before
                return put
        put.append(data)


def test_a_put_whose_rotation_cannot_open_a_file_is_refused_and_the_queue_stays_healthy(qdir):
    with JournaledQueue(qdir, SMALL, name="q") as q:
        acked = _fill_first_file(q)
        next_id = q.journal.next_id
        ops = FailingOpens(new_journal_file("q"))
        with fileio.use(ops):
            for _ in range(3):
                with pytest.raises(JournalIOError) as exc:
                    q.put(b"r" * 1000)
                assert exc.value.errno == errno.EMFILE
            health = q.stats().health
            assert health.ok and health.poisoned is None and q.journal.poisoned is None
            assert q.journal.next_id == next_id  # the refused puts took no id
            ops.heal()
            q.put(b"b" * 1000)  # rotates now
            acked.append(b"b" * 1000)
        assert len(_journal_files(qdir)) == 2
    assert _drain(qdir) == acked


def test_a_refused_put_many_writes_none_of_its_items(qdir):
    with JournaledQueue(qdir, SMALL, name="q") as q:
        acked = [b"first"]
        q.put(b"first")
        batch = [b"%d" % k + b"x" * 1500 for k in range(8)]  # five files' worth
        created = 0

        def third_new_file(path: str, flags: int) -> bool:
            nonlocal created
            if not new_journal_file("q")(path, flags):
                return False
            created += 1
            return created > 2

        ops = FailingOpens(third_new_file)
        with fileio.use(ops):
            with pytest.raises(JournalIOError):
                q.put_many(batch)  # the third new file cannot be opened
        assert q.journal.next_id == 2
        assert q.stats().health.ok
        q.put_many(batch)
        acked += batch
    assert _drain(qdir) == acked


def test_a_sync_that_cannot_open_a_retired_file_refuses_and_a_later_sync_succeeds(qdir):
    cfg = QueueConfig(sync="never", journal_size=4096, checkpoint_interval=3600.0)
    with JournaledQueue(qdir, cfg, name="q") as q:
        for k in range(10):
            q.put(b"%d" % k + b"." * 1000)  # rotations under "never": retired files unsynced
        ops = FailingOpens(journal_file_read("q"))
        with fileio.use(ops):
            with pytest.raises(JournalIOError) as exc:
                q.sync()
            assert exc.value.errno == errno.EMFILE and ops.failed == 1
            assert q.stats().health.poisoned is None
            ops.heal()
            q.sync()
        q.put(b"after")


def test_a_read_behind_file_that_cannot_be_opened_fails_that_get_only(qdir):
    cfg = QueueConfig(sync="never", journal_size=4096, checkpoint_interval=3600.0)
    with JournaledQueue(qdir, cfg, name="q") as q:
        r = q.reader("r", ReaderConfig(max_memory=4096))
        put = [b"%03d" % k + b"." * 500 for k in range(40)]
        q.put_many(put)
        got = [r.get(block=False).data for _ in range(3)]
        ops = FailingOpens(journal_file_read("q"))
        with fileio.use(ops):
            with pytest.raises(OSError) as exc:
                while True:
                    got.append(r.get(block=False).data)  # reads from memory until a refill opens a file
            assert exc.value.errno == errno.EMFILE and ops.failed >= 1
            assert q.stats().health.poisoned is None
            q.put(b"still accepted")
            ops.heal()
            got += [it.data for it in ready_items(r)]
        assert got == put + [b"still accepted"]


def test_an_adoption_whose_rotation_cannot_open_a_file_leaves_no_intent_behind(qdir):
    # After a refused adoption, other puts take the ids the batch would have had: a stale intent
    # line would make the next open count them as the batch's and drop its items.
    with JournaledQueue(qdir, SMALL, name="q") as q:
        acked = _fill_first_file(q)
        spooled = [b"s%d" % k + b"-" * 1000 for k in range(3)]
        assert spool_put(qdir, spooled, key="batch-1")
        with fileio.use(FailingOpens(new_journal_file("q"))):
            with pytest.raises(JournalIOError):
                q.adopt_spool()
            q.put(b"small")  # fits the current file: no open needed
            acked.append(b"small")
        assert q.stats().health.poisoned is None
    assert sorted(_drain(qdir)) == sorted(acked + spooled)
    assert not spool_put(qdir, spooled, key="batch-1")  # adopted, for good


_CHILD = textwrap.dedent(
    """
    import errno, json, os, resource, sys
    from journaled import JournaledQueue, JournalIOError, QueueConfig

    path = sys.argv[1]
    cfg = QueueConfig(sync="always", journal_size=4096, checkpoint_interval=3600.0)
    q = JournaledQueue(path, cfg, name="q")
    acked, refused = [], []
    q.put(b"warm")  # anything opened lazily is open now
    acked.append("warm")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
    hog = []
    while True:  # take every descriptor left, as a connection flood would
        try:
            hog.append(os.open(os.devnull, os.O_RDONLY))
        except OSError as exc:
            assert exc.errno == errno.EMFILE
            break
    for k in range(12):
        data = "p%d" % k + "." * 1000
        try:
            q.put(data.encode())
            acked.append(data)
        except JournalIOError as exc:
            refused.append((data, exc.errno))
    poisoned = q.stats().health.poisoned
    for fd in hog:
        os.close(fd)
    q.put(b"after")
    acked.append("after")
    q.close()
    print(json.dumps({"acked": acked, "refused": refused, "poisoned": poisoned}))
    """
)


def test_a_real_descriptor_limit_refuses_the_rotating_put_and_the_queue_goes_on(qdir):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, qdir], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    res = json.loads(done.stdout)
    assert res["refused"] and {e for _d, e in res["refused"]} == {errno.EMFILE}
    assert res["poisoned"] is None
    assert [d.decode() for d in _drain(qdir)] == res["acked"]


class _Sequence(fileio.FileOps):
    """Records the order of journal-file creations and writes."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        if new_journal_file("q")(path, flags):
            self.events.append("create")
        return super().open(path, flags, mode)

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> int:
        self.events.append("write")
        return super().write(fd, data)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    first=st.lists(st.integers(0, 900), max_size=4),
    batch=st.lists(st.integers(0, 2500), min_size=1, max_size=12),
)
def test_an_append_creates_every_file_it_rotates_into_before_it_writes_and_no_more(
    tmp_path_factory, first, batch
):
    qdir = str(tmp_path_factory.mktemp("q") / "q")
    cfg = QueueConfig(sync="never", journal_size=2048, checkpoint_interval=3600.0)
    with JournaledQueue(qdir, cfg, name="q") as q:
        if first:
            q.put_many([b"f" * n for n in first])
        seq = _Sequence()
        with fileio.use(seq):
            q.put_many([b"b" * n for n in batch])
        creates = seq.events.count("create")
        assert seq.events[:creates] == ["create"] * creates  # all before the first write
        assert len(_journal_files(qdir)) == len(q.journal.files)  # none created in vain
