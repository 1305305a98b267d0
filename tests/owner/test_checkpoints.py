"""Checkpoints and recovery of readers: clean reopen, crashes, damaged or odd checkpoints.

A "crash" is taken three ways: copying the directory while the queue is open (what is on disk is
what a crash would leave, since the copy never sees a close), and killing a subprocess with
SIGKILL.  The guarantees (issue 3): after a clean close nothing committed comes back and open reads
come back at the head in order; after a crash at most the items committed since the last
checkpoint come back and nothing is lost; a bad checkpoint means replay from the earliest item,
with a warning, never an exception.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from conftest import ready_items
from journaled import JournaledQueue, QueueConfig, Reader, ReaderConfig
from journaled.disk.checkpointfiles import registry_path, write_registry
from journaled.format.smallfiles import CheckpointData, ReaderCounts, decode_checkpoint, encode_checkpoint

NAME = "q"


def open_q(path: str, **kw: object) -> JournaledQueue:
    kw.setdefault("sync", "always")
    kw.setdefault("checkpoint_interval", 3600.0)  # checkpoints only where the test says
    return JournaledQueue(path, QueueConfig(**kw), name=NAME)  # type: ignore[arg-type]


def ckpt_file(path: str, reader: str) -> str:
    return os.path.join(path, f"{NAME}.read.{reader}")


def read_ckpt(path: str, reader: str) -> CheckpointData:
    with open(ckpt_file(path, reader), "rb") as f:
        return decode_checkpoint(f.read())


def write_ckpt(path: str, reader: str, data: CheckpointData) -> None:
    with open(ckpt_file(path, reader), "wb") as f:
        f.write(encode_checkpoint(data))


def journal_files(path: str) -> list[str]:
    return sorted(e for e in os.listdir(path) if e.startswith(f"{NAME}.") and e[len(NAME) + 1 :].isdigit())


def drain(reader) -> list:
    return list(ready_items(reader))


def take(reader, n: int) -> list:
    return [reader.get(block=False) for _ in range(n)]


def crash_copy(q: JournaledQueue, dst: str) -> str:
    """The directory as a crash would leave it now; the original object is then dropped."""
    shutil.copytree(q.path, dst, ignore=shutil.ignore_patterns(".journaled.sock"))  # the live socket
    q.close()  # only to release threads and fds: the copy never saw this close
    return dst


def warnings_of(caplog) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)


# ----------------------------------------------------------------------------- clean reopen


def test_clean_reopen_redelivers_open_reads_at_the_head_in_order_and_no_committed_item(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        ids = q.put_many([b"%d" % k for k in range(10)])
        got = take(r, 6)
        for k in (0, 1, 3):
            r.commit(got[k])
        r.abort(got[4])
        again = r.get(block=False)
        assert again.id == ids[4]
        # open now: ids[2], ids[4] (aborted once), ids[5]
    with open_q(tmpfs_qdir) as q:
        after = drain(q.reader("a"))
        assert [i.id for i in after] == [ids[2], ids[4], ids[5]] + ids[6:]
        assert [i.data for i in after] == [b"2", b"4", b"5", b"6", b"7", b"8", b"9"]
        assert {i.id: i.error_count for i in after if i.error_count} == {ids[4]: 1}


def test_out_of_order_commits_survive_reopen(tmpfs_qdir):
    # libkestrel writes its out-of-order "done" set but ignores it on replay; we must not.
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        ids = q.put_many([b"%d" % k for k in range(8)])
        got = take(r, 5)
        for k in (1, 3, 4):
            r.commit(got[k])
    ck = read_ckpt(tmpfs_qdir, "a")
    assert ck.head == ids[0] and set(ck.done) == {ids[1], ids[3], ids[4]}
    with open_q(tmpfs_qdir) as q:
        assert [i.id for i in drain(q.reader("a"))] == [ids[0], ids[2]] + ids[5:]


def test_out_of_order_commits_collapse_into_the_head_when_the_gap_closes(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        ids = q.put_many([b"%d" % k for k in range(4)])
        got = take(r, 3)
        r.commit(got[2])
        r.commit(got[1])
        r.commit(got[0])
    ck = read_ckpt(tmpfs_qdir, "a")
    assert (ck.head, ck.done) == (ids[3], ())


def test_checkpoint_file_is_named_after_queue_and_reader_and_leaves_no_temp_file(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        r = q.reader("analytics")
        q.put(b"x")
        r.commit(r.get(block=False))
        q.checkpoint()
        assert read_ckpt(tmpfs_qdir, "analytics").head == 2
        assert not [e for e in os.listdir(tmpfs_qdir) if e.endswith(".tmp")]


def test_checkpoint_records_a_journal_position_for_the_head(tmpfs_qdir):
    with open_q(tmpfs_qdir, journal_size=400) as q:
        r = q.reader("a")
        q.put_many([b"x" * 40 for _ in range(30)])
        for item in take(r, 20):
            r.commit(item)
        q.checkpoint()
        ck = read_ckpt(tmpfs_qdir, "a")
        assert ck.head == 21
        assert f"{NAME}.{ck.file_ms}" in journal_files(tmpfs_qdir)
        assert ck.file_offset > 0


def test_background_thread_writes_checkpoints_when_something_changed(tmpfs_qdir):
    with open_q(tmpfs_qdir, checkpoint_interval=0.02) as q:
        r = q.reader("a")
        q.put(b"x")
        r.commit(r.get(block=False))
        import time

        end = time.monotonic() + 60
        while read_ckpt(tmpfs_qdir, "a").head != 2:
            assert time.monotonic() < end, "no checkpoint was written"
            time.sleep(0.01)


def test_a_wrong_position_hint_is_ignored(tmpfs_qdir):
    with open_q(tmpfs_qdir, journal_size=300) as q:
        r = q.reader("a")
        ids = q.put_many([b"y" * 30 for _ in range(40)])
        for item in take(r, 25):
            r.commit(item)
    ck = read_ckpt(tmpfs_qdir, "a")
    files = journal_files(tmpfs_qdir)
    for ms, offset in [
        (ck.file_ms, 7),
        (ck.file_ms, 10**9),
        (12345, ck.file_offset),
        (int(files[0].split(".")[1]), 40),
    ]:
        write_ckpt(tmpfs_qdir, "a", CheckpointData(ck.head, ms, offset, ck.done, ck.errors))
        with open_q(tmpfs_qdir) as q:
            assert [i.id for i in drain(q.reader("a"))] == ids[25:]


def test_error_counts_survive_a_clean_reopen(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        q.put_many([b"1", b"2"])
        for _ in range(3):
            r.abort(r.get(block=False))
    with open_q(tmpfs_qdir) as q:
        assert [(i.data, i.error_count) for i in drain(q.reader("a"))] == [(b"1", 3), (b"2", 0)]


# ----------------------------------------------------------------------------- crashes


def test_crash_redelivers_at_most_the_commits_since_the_last_checkpoint(tmpfs_qdir):
    q = open_q(tmpfs_qdir)
    a, b = q.reader("a"), q.reader("b")
    ids = q.put_many([b"%d" % k for k in range(20)])
    for item in take(a, 5):
        a.commit(item)
    got = take(b, 6)
    for k in (0, 2, 4):  # out of order on b
        b.commit(got[k])
    q.checkpoint()
    for item in take(a, 3):  # since the checkpoint: may come back
        a.commit(item)
    take(a, 2)  # open at the crash: must come back
    b.commit(got[1])
    copy = crash_copy(q, tmpfs_qdir + "-crashed")
    with open_q(copy) as q2:
        got_a = [i.id for i in drain(q2.reader("a"))]
        got_b = [i.id for i in drain(q2.reader("b"))]
    # exactly what the last checkpoint says (no background checkpoint can have run)
    assert got_a == ids[5:]
    assert got_b == [ids[1], ids[3]] + ids[5:]


def test_crash_loses_nothing_that_was_put_before_it(tmpfs_qdir):
    q = open_q(tmpfs_qdir, journal_size=500)
    r = q.reader("a")
    ids = q.put_many([b"%d" % k for k in range(60)])
    for item in take(r, 10):
        r.commit(item)
    q.checkpoint()
    ids += [q.put(b"late")]
    copy = crash_copy(q, tmpfs_qdir + "-crashed")
    with open_q(copy) as q2:
        assert [i.id for i in drain(q2.reader("a"))] == ids[10:]


_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from journaled import JournaledQueue, QueueConfig
    q = JournaledQueue(sys.argv[1], QueueConfig(sync="always", checkpoint_interval=3600,
                                                journal_size=2000), name="q")
    r = q.reader("a")
    ids = q.put_many([b"item-%d" % k for k in range(50)])
    got = [r.get(block=False) for _ in range(25)]
    for it in got[:20]:
        r.commit(it)
    r.commit(got[21]); r.commit(got[23])      # out of order, before the checkpoint
    q.checkpoint()
    r.commit(got[20]); r.commit(got[22]); r.commit(got[24])  # after it
    [r.get(block=False) for _ in range(5)]   # open at the crash
    sys.stdout.write("ready\\n"); sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_sigkilled_process_redelivers_only_commits_since_its_last_checkpoint(tmpfs_qdir):
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, tmpfs_qdir], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert proc.stdout == "ready\n"
    with open_q(tmpfs_qdir) as q:
        got = [i.id for i in drain(q.reader("a"))]
    # 21..25 were read; 22 and 24 committed before the checkpoint never come back
    assert got == [21, 23, 25] + list(range(26, 51))


# ----------------------------------------------------------------------------- bad checkpoints


def _damage(path: str, how: str) -> None:
    f = ckpt_file(path, "a")
    if how == "missing":
        os.unlink(f)
        return
    raw = open(f, "rb").read()
    if how == "truncated":
        raw = raw[: len(raw) // 2]
    elif how == "empty":
        raw = b""
    elif how == "corrupt":
        raw = raw[:20] + bytes([raw[20] ^ 0x40]) + raw[21:]
    elif how == "garbage":
        raw = os.urandom(len(raw))
    elif how == "future-version":
        raw = raw[:8] + b"\x63\x00" + raw[10:]
    with open(f, "wb") as out:
        out.write(raw)


@pytest.mark.parametrize("how", ["missing", "truncated", "empty", "corrupt", "garbage", "future-version"])
def test_bad_checkpoint_warns_and_replays_from_the_earliest_item(tmpfs_qdir, caplog, how):
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        q.reader("b")  # a second reader that must be untouched
        ids = q.put_many([b"%d" % k for k in range(6)])
        for item in take(r, 4):
            r.commit(item)
    _damage(tmpfs_qdir, how)
    caplog.set_level(logging.WARNING, logger="journaled")
    with open_q(tmpfs_qdir) as q:
        assert q.readers() == ["a", "b"]
        assert [i.id for i in drain(q.reader("a"))] == ids  # replay, never loss
        assert [i.id for i in drain(q.reader("b"))] == ids  # the other reader is untouched
    assert f"{NAME}.read.a" in warnings_of(caplog)


def test_registry_listing_a_reader_without_checkpoint_replays_it_from_the_earliest(tmpfs_qdir, caplog):
    with open_q(tmpfs_qdir) as q:
        q.reader("a")
        ids = q.put_many([b"1", b"2"])
    write_registry(registry_path(tmpfs_qdir, NAME), ["a", "ghost"], 0o600)
    caplog.set_level(logging.WARNING, logger="journaled")
    with open_q(tmpfs_qdir) as q:
        assert q.readers() == ["a", "ghost"]
        assert [i.id for i in drain(q.reader("ghost"))] == ids
    assert "ghost" in warnings_of(caplog)
    assert os.path.exists(ckpt_file(tmpfs_qdir, "ghost"))  # written on close


@pytest.mark.parametrize("how", ["missing", "damaged"])
def test_readers_are_found_from_checkpoint_files_when_the_registry_is_bad(tmpfs_qdir, how):
    with open_q(tmpfs_qdir) as q:
        q.reader("a")
        q.reader("b")
    reg = registry_path(tmpfs_qdir, NAME)
    if how == "missing":
        os.unlink(reg)
    else:
        open(reg, "ab").write(b"junk\n")
    with open_q(tmpfs_qdir) as q:
        assert q.readers() == ["a", "b"]
    with open_q(tmpfs_qdir) as q:  # and the registry was rewritten
        assert q.readers() == ["a", "b"]


def test_head_beyond_the_journal_end_moves_new_ids_above_it_with_a_warning(tmpfs_qdir, caplog):
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        q.put_many([b"1", b"2"])
        for item in take(r, 2):
            r.commit(item)
    write_ckpt(tmpfs_qdir, "a", CheckpointData(100, done=(150,), errors=((120, 3),)))
    caplog.set_level(logging.WARNING, logger="journaled")
    with open_q(tmpfs_qdir) as q:
        new = q.put_many([b"3", b"4"])
        # ids the reader has seen (up to 150) are never given to new items
        assert new[0] > 150
        got = drain(q.reader("a"))
        assert [(i.id, i.error_count) for i in got] == [(new[0], 0), (new[1], 0)]
    assert "lost tail" in warnings_of(caplog)


def test_head_before_the_journal_start_is_clamped_with_a_warning(tmpfs_qdir, caplog):
    with open_q(tmpfs_qdir, journal_size=300) as q:
        r = q.reader("a")
        ids = q.put_many([b"z" * 30 for _ in range(40)])
        for item in take(r, 30):
            r.commit(item)
        q.checkpoint()
        q.archive()
    with open_q(tmpfs_qdir) as q:
        first = q.journal.first_id()
    assert 1 < first <= 31
    counts = ReaderCounts(put_origin=1, delivered=30, committed=30)
    write_ckpt(tmpfs_qdir, "a", CheckpointData(1, done=(first + 1,), counts=counts))
    caplog.set_level(logging.WARNING, logger="journaled")
    with open_q(tmpfs_qdir) as q:
        got = [i.id for i in drain(q.reader("a"))]
        st = q.reader("a").stats()
    assert got == [i for i in ids if i >= first and i != first + 1]
    # said as what it is (files archived before the reader read them), not as damage
    assert f"items 1..{first - 1} were archived before it read them" in warnings_of(caplog)
    assert (st.committed, st.delivered, st.put) == (30, 30 + len(got), 40)  # its counters came through


def test_ids_after_a_lost_journal_tail_are_new_and_inherit_no_commits_or_error_counts(tmpfs_qdir):
    with open_q(tmpfs_qdir, sync="never") as q:
        q.put_many([b"1", b"2", b"3"])
    (jname,) = journal_files(tmpfs_qdir)
    size3 = os.path.getsize(os.path.join(tmpfs_qdir, jname))
    with open_q(tmpfs_qdir, sync="never") as q:
        r = q.reader("a")
        q.put_many([b"4", b"5"])
        got = take(r, 5)
        r.commit(got[3])  # id 4, out of order
        for _ in range(3):
            r.abort(got[4])
            got[4] = r.get(block=False)  # id 5, error_count grows
    assert read_ckpt(tmpfs_qdir, "a").errors == ((5, 3),)
    os.truncate(os.path.join(tmpfs_qdir, jname), size3)  # the tail holding ids 4 and 5 is gone
    with open_q(tmpfs_qdir) as q:
        new = q.put_many([b"new4", b"new5"])
        assert new == [6, 7]  # 4 was committed and 5 delivered: neither id names a new item
        got = drain(q.reader("a"))
        assert [(i.id, i.data, i.error_count) for i in got] == [
            (1, b"1", 0),
            (2, b"2", 0),
            (3, b"3", 0),
            (6, b"new4", 0),
            (7, b"new5", 0),
        ]


def test_opening_never_raises_on_any_checkpoint_bytes(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        q.reader("a")
        ids = q.put_many([b"1"])
    good = open(ckpt_file(tmpfs_qdir, "a"), "rb").read()
    for k in range(0, len(good), 3):
        with open(ckpt_file(tmpfs_qdir, "a"), "wb") as f:
            f.write(good[:k] + bytes([good[k] ^ 0xFF]) + good[k + 1 :])
        with open_q(tmpfs_qdir) as q:
            assert [i.id for i in drain(q.reader("a"))] == ids


# ----------------------------------------------------------------------------- races


def test_checkpoints_racing_remove_reader_never_resurrect_it(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        q.put(b"x")
        stop = threading.Event()
        errors: list[BaseException] = []
        current: dict[str, Reader] = {}  # the live handle of each reader (the main thread's)

        def checkpointer() -> None:
            while not stop.is_set():
                try:
                    for rd in list(current.values()):
                        with rd.core.lock:
                            rd.core.mark_dirty()  # a removed reader's core is no longer saved
                    q.checkpoint()
                except BaseException as exc:  # noqa: BLE001
                    errors.append(exc)
                    return

        t = threading.Thread(target=checkpointer)
        t.start()
        try:
            for k in range(20):
                r = current[f"r{k % 3}"] = q.reader(f"r{k % 3}", ReaderConfig())
                r.commit(r.get(block=False))
                q.remove_reader(f"r{k % 3}")
                assert not os.path.exists(ckpt_file(tmpfs_qdir, f"r{k % 3}"))
        finally:
            stop.set()
            t.join()
        assert not errors
    with open_q(tmpfs_qdir) as q:
        assert q.readers() == []


def test_reopened_reader_reading_behind_skips_a_run_of_out_of_order_commits(tmpfs_qdir):
    # found by the state machine: a read-back window holding only committed ids must not make
    # get() report Empty while later items wait on disk
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a", ReaderConfig(max_memory=1))
        ids = q.put_many([b"", b"xx", b"yy", b"zz", b"", b"w"])
        got = take(r, 5)
        for k in (1, 2, 3):
            r.commit(got[k])
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a", ReaderConfig(max_memory=1))
        assert [i.id for i in drain(r)] == [ids[0], ids[4], ids[5]]


def test_a_reader_reading_an_old_file_after_reopen_checkpoints_a_precise_hint(tmpfs_qdir):
    # Files older than the newest have no index after a reopen; reading one teaches the journal
    # where its records are, so the checkpoint points near the head, not at the file's start.
    with open_q(tmpfs_qdir, journal_size=1 << 20, sync="never") as q:
        q.reader("a")
        ids = q.put_many([b"k" * 100 for _ in range(20000)])  # ~2.6 MB: 3 files
    with open_q(tmpfs_qdir, journal_size=1 << 20) as q:
        r = q.reader("a")
        for _ in range(6000):
            r.commit(r.get(block=False))
        q.checkpoint()
        ck = read_ckpt(tmpfs_qdir, "a")
        first_file = q.journal.files[0]
        assert ck.head == ids[6000] and ck.file_ms == first_file.ms
        assert ck.file_offset > 300_000  # within 64 KiB of the head's record, not at the start
