"""Archiving: journal files go away exactly when every reader has passed them.

Archiving goes by each reader's *checkpointed* head (docs/design.md, "Readers, checkpoints and
recovery"), so the tests call ``q.checkpoint()`` and then the archiving pass ``q.archive()``
that the background thread runs, at points of their choosing; one test lets the background
thread do both on its own.
"""

from __future__ import annotations

import os
import time

from conftest import ready_items as iter_all
from journaled import JournaledQueue, QueueConfig, ReaderConfig

NAME = "q"
PAYLOAD = b"p" * 40


def open_q(path: str, **kw: object) -> JournaledQueue:
    kw.setdefault("sync", "never")
    kw.setdefault("journal_size", 400)
    kw.setdefault("checkpoint_interval", 3600.0)
    return JournaledQueue(path, QueueConfig(**kw), name=NAME)  # type: ignore[arg-type]


def journal_files(path: str) -> list[str]:
    return sorted(
        (e for e in os.listdir(path) if e.startswith(f"{NAME}.") and e[len(NAME) + 1 :].isdigit()),
        key=lambda e: int(e.split(".")[1]),
    )


def file_ranges(q: JournaledQueue) -> list[tuple[str, int, int]]:
    """(file name, first id, last id) of every journal file, oldest first."""
    files = list(q.journal.files)
    out = []
    for jf, nxt in zip(files, files[1:] + [None]):
        last = (nxt.first_id if nxt is not None else q.journal.next_id) - 1
        out.append((os.path.basename(jf.path), jf.first_id, last))
    return out


def settle(q: JournaledQueue) -> None:
    q.checkpoint()
    q.archive()


def commit_through(reader, last_id: int) -> None:
    """Get and commit every item up to and including ``last_id``."""
    while True:
        item = reader.get(block=False)
        reader.commit(item)
        if item.id >= last_id:
            return


def test_a_file_goes_exactly_when_every_reader_has_passed_its_last_item(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        a, b = q.reader("a"), q.reader("b")
        q.put_many([PAYLOAD] * 30)
        ranges = file_ranges(q)
        assert len(ranges) >= 4
        (f0, _, last0), (f1, _, last1) = ranges[0], ranges[1]
        commit_through(a, last1)
        settle(q)
        assert journal_files(tmpfs_qdir)[0] == f0  # b still needs it
        commit_through(b, last0 - 1)
        settle(q)
        assert journal_files(tmpfs_qdir)[0] == f0  # b's head is on the file's last item
        commit_through(b, last0)
        settle(q)
        assert journal_files(tmpfs_qdir)[0] == f1  # exactly f0 went
        assert journal_files(tmpfs_qdir) == [r[0] for r in ranges[1:]]


def test_an_open_read_holds_its_file(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        q.put_many([PAYLOAD] * 30)
        (f0, first0, _), (_, _, last1) = file_ranges(q)[:2]
        held = r.get(block=False)
        assert held.id == first0
        while True:
            item = r.get(block=False)
            r.commit(item)
            if item.id >= last1:
                break
        settle(q)
        assert journal_files(tmpfs_qdir)[0] == f0
        r.commit(held)
        settle(q)
        assert f0 not in journal_files(tmpfs_qdir)


def test_the_file_being_written_is_never_archived(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        q.put_many([PAYLOAD] * 30)
        active = file_ranges(q)[-1][0]
        for item in list(iter_all(r)):
            r.commit(item)
        assert r.head == q.journal.next_id  # past every item there is
        settle(q)
        assert journal_files(tmpfs_qdir) == [active]
        # and the queue goes on normally in it
        new = q.put(PAYLOAD)
        assert r.get(block=False).id == new


def test_archive_dir_receives_the_files_byte_for_byte(tmpfs_qdir):
    with open_q(tmpfs_qdir, archive_dir="old") as q:
        r = q.reader("a")
        q.put_many([PAYLOAD] * 30)
        ranges = file_ranges(q)
        before = {name: open(os.path.join(tmpfs_qdir, name), "rb").read() for name, _, _ in ranges[:-1]}
        for item in list(iter_all(r)):
            r.commit(item)
        settle(q)
        arch = os.path.join(tmpfs_qdir, "old")
        assert sorted(os.listdir(arch)) == sorted(before)
        for name, raw in before.items():
            assert open(os.path.join(arch, name), "rb").read() == raw
        assert journal_files(tmpfs_qdir) == [ranges[-1][0]]


def test_with_no_readers_nothing_is_archived(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        ids = q.put_many([PAYLOAD] * 30)
        names = journal_files(tmpfs_qdir)
        settle(q)
        assert journal_files(tmpfs_qdir) == names
    with open_q(tmpfs_qdir) as q:
        settle(q)
        assert journal_files(tmpfs_qdir) == names
        assert [i.id for i in iter_all(q.reader("late"))] == ids


def test_removing_the_slowest_reader_makes_files_archivable(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        fast, q_slow = q.reader("fast"), q.reader("slow")
        q.put_many([PAYLOAD] * 30)
        names = journal_files(tmpfs_qdir)
        for item in list(iter_all(fast)):
            fast.commit(item)
        q_slow.get(block=False)  # an open read: removal drops it
        settle(q)
        assert journal_files(tmpfs_qdir) == names
        q.remove_reader("slow")
        settle(q)
        assert journal_files(tmpfs_qdir) == names[-1:]


def test_a_reader_started_late_holds_nothing_before_its_start(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        q.put_many([PAYLOAD] * 30)
        names = journal_files(tmpfs_qdir)
        q.reader("late", ReaderConfig(start="latest"))
        settle(q)
        assert journal_files(tmpfs_qdir) == names[-1:]


def test_archiving_waits_for_the_checkpoint_of_the_head(tmpfs_qdir):
    # A crash right after archiving must never find a checkpoint pointing before the journal.
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        q.put_many([PAYLOAD] * 30)
        names = journal_files(tmpfs_qdir)
        for item in list(iter_all(r)):
            r.commit(item)
        q.archive()
        assert journal_files(tmpfs_qdir) == names
        q.checkpoint()
        q.archive()
        assert journal_files(tmpfs_qdir) == names[-1:]


def test_the_background_thread_archives_on_its_own(tmpfs_qdir):
    with open_q(tmpfs_qdir, checkpoint_interval=0.02) as q:
        r = q.reader("a")
        q.put_many([PAYLOAD] * 30)
        for item in list(iter_all(r)):
            r.commit(item)
        end = time.monotonic() + 60
        while len(journal_files(tmpfs_qdir)) > 1:
            assert time.monotonic() < end, "background thread never archived"
            time.sleep(0.01)


def test_archived_files_stay_gone_and_reading_continues_after_reopen(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        a, b = q.reader("a"), q.reader("b", ReaderConfig(max_memory=1))
        ids = q.put_many([PAYLOAD] * 30)
        for item in list(iter_all(a)):
            a.commit(item)
        got_b = []
        for _ in range(17):
            item = b.get(block=False)
            b.commit(item)
            got_b.append(item.id)
        before = journal_files(tmpfs_qdir)
        settle(q)
        left = journal_files(tmpfs_qdir)
        assert len(left) < len(before) and before[-len(left) :] == left
    with open_q(tmpfs_qdir) as q:
        assert journal_files(tmpfs_qdir) == left
        rest = [i.id for i in iter_all(q.reader("b"))]
        assert got_b + rest == ids
        assert list(iter_all(q.reader("a"))) == []
