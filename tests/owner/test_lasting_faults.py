"""Faults that last: the background backs off, reports once, never spins, and notices when the
queue's directory or journal file is gone.

The faults are real: a full 1 MiB tmpfs (mounted here when the tests run as root), a child
process whose ``RLIMIT_FSIZE`` makes the journal's write fail with EFBIG (no root needed), a
directory removed or replaced under a live queue, a checkpoint's temporary name taken by a
directory.  The idle figures come from scripts/soak_faults.py, run in a child process, so CPU
time and log records are the queue's alone.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import subprocess
import threading
import time

import pytest

from conftest import ready_items
from journaled import JournaledQueue, JournalIOError, QueueConfig
from journaled.disk import fileio
from journaled.errors import QueueDirectoryGone
from journaled.owner import engine as engine_mod
from support.paths import ROOT

_spec = importlib.util.spec_from_file_location("soak_faults", os.path.join(ROOT, "scripts", "soak_faults.py"))
assert _spec is not None and _spec.loader is not None
soak = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(soak)

IDLE = 5.0
#: "a handful" of log records over the idle window: the first report of each failing step and
#: perhaps one summary, never one per tick.
MAX_IDLE_RECORDS = 5
MAX_IDLE_CPU = 0.1


def _child(scenario: str, directory: str) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    res = soak.run_child(scenario, directory, IDLE, env=env)
    assert "failed" not in res, res
    return res


@pytest.fixture
def small_fs(tmp_path):
    """A 1 MiB tmpfs mounted at ``<tmp_path>/fs`` (root only), unmounted after the test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (test_fsize_* covers the same without root)")
    fs = tmp_path / "fs"
    fs.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(fs)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    yield str(fs)
    subprocess.run(["umount", "-l", str(fs)], capture_output=True)


@pytest.fixture
def caplog_journaled(caplog):
    caplog.set_level(logging.INFO, logger="journaled")
    return caplog


def _wait_for(cond, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


# ----------------------------------------------------------------------------- idle after a fault
def test_full_disk_poisons_the_queue_then_the_idle_queue_is_quiet_and_cheap(small_fs):
    res = _child("diskfull", small_fs)
    assert str(res["fault"]).startswith("JournalIOError: [Errno 28]"), res
    assert str(res["put_after_fault"]).startswith("JournalIOError"), res
    assert res["log_records_idle"] <= MAX_IDLE_RECORDS, res
    assert res["cpu_s_idle"] < MAX_IDLE_CPU, res


def test_fsize_limit_poisons_the_queue_then_the_idle_queue_is_quiet_and_cheap(tmp_path):
    res = _child("fsize", str(tmp_path))
    assert str(res["fault"]).startswith("JournalIOError: [Errno 27]"), res
    assert str(res["put_after_fault"]).startswith("JournalIOError"), res
    assert res["log_records_idle"] <= MAX_IDLE_RECORDS, res
    assert res["cpu_s_idle"] < MAX_IDLE_CPU, res
    health = res["health"]
    assert isinstance(health, dict) and health["poisoned"] and health["poisoned_since"], res


def test_removed_directory_refuses_puts_and_the_idle_queue_is_quiet_and_cheap(tmp_path):
    res = _child("rmdir", str(tmp_path))
    assert str(res["put_after_fault"]).startswith("QueueDirectoryGone"), res
    assert res["log_records_idle"] <= MAX_IDLE_RECORDS, res
    assert res["cpu_s_idle"] < MAX_IDLE_CPU, res
    assert "close" not in res, res  # close() neither raises nor writes into a missing directory


# ----------------------------------------------------------------------------- health in stats()
def test_stats_say_a_full_disk_poisoned_the_queue_since_when_and_why(small_fs):
    qpath = os.path.join(small_fs, "q")
    with JournaledQueue(qpath, QueueConfig(sync="always")) as q:
        assert q.stats().health.ok and q.stats().health.poisoned is None
        before = time.time()
        with pytest.raises(JournalIOError) as err:
            for _ in range(1000):
                q.put(b"x" * 4096)
        assert err.value.errno == 28
        health = q.stats().health
        assert not health.ok
        assert health.poisoned is not None and "No space left" in health.poisoned
        assert health.poisoned_since is not None and before - 1 <= health.poisoned_since <= time.time()
        assert not health.directory_gone


def test_stats_of_a_healthy_queue_report_no_fault(tmp_path):
    with JournaledQueue(str(tmp_path / "q"), QueueConfig(sync=0.01)) as q:
        q.put(b"a")
        q.sync()
        health = q.stats().health
        assert health.ok and health.poisoned is None and health.poisoned_since is None
        assert not health.directory_gone and health.failing == () and health.errors == 0
        assert health.last_error is None


# ----------------------------------------------------------------------------- directory gone
def test_a_replaced_directory_is_noticed_and_nothing_is_written_into_the_new_one(tmp_path):
    qpath = str(tmp_path / "q")
    moved = str(tmp_path / "moved")
    q = JournaledQueue(qpath, QueueConfig(sync=0.02, checkpoint_interval=0.05))
    r = q.reader("r")
    q.put_many([b"1", b"2", b"3"])
    r.commit(r.get(block=False))
    q.sync()
    time.sleep(0.3)  # the checkpoint of that commit is written
    os.rename(qpath, moved)
    os.mkdir(qpath)  # somebody else's directory now
    assert _wait_for(lambda: q.stats().health.directory_gone)
    with pytest.raises(QueueDirectoryGone) as err:
        q.put(b"refused")
    assert isinstance(err.value, JournalIOError)
    assert q.stats().health.poisoned is not None
    r.commit(r.get(block=False))  # in-memory delivery goes on; it is never checkpointed
    q.close()
    assert os.listdir(qpath) == []  # not a checkpoint, not a journal byte
    with JournaledQueue(moved) as q2:  # the moved directory still holds every acknowledged item
        assert [it.data for it in ready_items(q2.reader("r"))] == [b"2", b"3"]


def test_a_removed_journal_file_is_noticed_and_puts_are_refused(tmp_path):
    qpath = str(tmp_path / "q")
    with JournaledQueue(qpath, QueueConfig(sync=0.02)) as q:
        q.put(b"a")
        q.sync()
        current = q.journal.files[-1].path
        os.unlink(current)
        assert _wait_for(lambda: q.stats().health.directory_gone)
        with pytest.raises(QueueDirectoryGone):
            q.put(b"b")


def test_a_removed_directory_is_noticed_under_sync_always(tmp_path):
    qpath = str(tmp_path / "q")
    with JournaledQueue(qpath, QueueConfig(sync="always", checkpoint_interval=0.05)) as q:
        q.put(b"a")
        shutil.rmtree(qpath)
        assert _wait_for(lambda: q.stats().health.directory_gone)
        with pytest.raises(QueueDirectoryGone):
            q.put(b"b")


# ----------------------------------------------------------------------------- backoff and the log
def _plant_checkpoint_blocker(qpath: str) -> str:
    """Make every checkpoint of reader ``r`` fail for real: its temporary name is a directory."""
    blocker = os.path.join(qpath, ".q.read.r.tmp")
    deadline = time.monotonic() + 10
    while True:
        try:
            os.mkdir(blocker)
            return blocker
        except FileExistsError:  # the background is writing that checkpoint right now
            if time.monotonic() > deadline:
                raise
            time.sleep(0.001)


def test_a_failing_checkpoint_is_logged_once_retried_with_backoff_and_recovers(tmp_path, caplog_journaled):
    qpath = str(tmp_path / "q")
    with JournaledQueue(qpath, QueueConfig(sync=0.02, checkpoint_interval=0.05), name="q") as q:
        r = q.reader("r")
        blocker = _plant_checkpoint_blocker(qpath)
        q.put(b"a")
        r.commit(r.get(block=False))
        time.sleep(2.0)
        failures = [rec for rec in caplog_journaled.records if rec.levelno >= logging.ERROR]
        assert 1 <= len(failures) <= 2, [rec.getMessage() for rec in failures]
        assert "checkpoint" in failures[0].getMessage()
        health = q.stats().health
        assert "checkpoint" in health.failing and health.errors >= 2 and health.last_error
        assert health.poisoned is None  # a checkpoint failure does not refuse puts
        os.rmdir(blocker)
        assert _wait_for(lambda: q.stats().health.failing == (), timeout=15)
        assert any("works again" in rec.getMessage() for rec in caplog_journaled.records)


def test_a_persistent_failure_is_summarised_not_repeated(tmp_path, caplog_journaled, monkeypatch):
    monkeypatch.setattr(engine_mod, "SUMMARY_EVERY", 0.5)
    qpath = str(tmp_path / "q")
    with JournaledQueue(qpath, QueueConfig(sync=0.02, checkpoint_interval=0.05), name="q") as q:
        r = q.reader("r")
        blocker = _plant_checkpoint_blocker(qpath)
        q.put(b"a")
        r.commit(r.get(block=False))
        assert _wait_for(
            lambda: any("still failing" in rec.getMessage() for rec in caplog_journaled.records), timeout=15
        )
        os.rmdir(blocker)


def test_a_failing_checkpoint_never_delays_the_periodic_flush(tmp_path, caplog_journaled):
    qpath = str(tmp_path / "q")
    with JournaledQueue(qpath, QueueConfig(sync=0.05, checkpoint_interval=0.05), name="q") as q:
        r = q.reader("r")
        blocker = _plant_checkpoint_blocker(qpath)
        q.put(b"a")
        r.commit(r.get(block=False))
        time.sleep(1.0)  # the checkpoint step is now in backoff
        for k in range(5):
            before = q.journal.commits.durable
            q.put(b"b%d" % k)
            # durable (fdatasynced by the background) within a tick or two, every time
            assert _wait_for(lambda: q.journal.commits.durable > before, timeout=0.5)
        os.rmdir(blocker)


def test_a_rotation_never_starts_a_journal_file_in_a_directory_that_replaced_ours(tmp_path):
    qpath = str(tmp_path / "q")
    q = JournaledQueue(qpath, QueueConfig(sync="never", journal_size=4096, checkpoint_interval=3600.0))
    q.put(b"first")
    os.rename(qpath, str(tmp_path / "moved"))
    os.mkdir(qpath)
    with pytest.raises(QueueDirectoryGone):
        for _ in range(100):  # passes journal_size at once: a rotation, before any tick
            q.put(b"x" * 1000)
    q.close()
    assert os.listdir(qpath) == []


class _StuckCheckpoints(fileio.FileOps):
    """A checkpoint that hangs in ``open`` (a stalled disk, a hung NFS server) until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.stuck = threading.Event()

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        if os.path.basename(path).startswith(".q.read.") and not self.release.is_set():
            self.stuck.set()
            self.release.wait(30)
        return super().open(path, flags, mode)


def test_a_stuck_checkpoint_never_delays_the_periodic_flush(tmp_path):
    qpath = str(tmp_path / "q")
    ops = _StuckCheckpoints()
    with fileio.use(ops):
        with JournaledQueue(qpath, QueueConfig(sync=0.05, checkpoint_interval=0.05), name="q") as q:
            ops.release.set()  # the reader's first checkpoint, written before q.reader returns
            r = q.reader("r")
            ops.release.clear()
            q.put(b"a")
            r.commit(r.get(block=False))
            try:
                assert ops.stuck.wait(5)  # the background checkpoint now hangs
                for k in range(5):
                    before = q.journal.commits.durable
                    q.put(b"b%d" % k)
                    assert _wait_for(lambda: q.journal.commits.durable > before, timeout=0.5)
            finally:
                ops.release.set()
