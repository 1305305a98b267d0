"""Ids are never reused: a journal that lost its tail (or every file) continues above every id
its readers have already seen, so id-based consumers (checkpoints, Spark offsets) stay correct."""

from __future__ import annotations

import glob
import os

from journaled import JournaledQueue, QueueConfig


def _journal_files(qdir: str) -> list[str]:
    return sorted(p for p in glob.glob(os.path.join(qdir, "q.*")) if p.rsplit(".", 1)[1].isdigit())


def test_ids_continue_above_committed_head_when_every_journal_file_is_lost(qdir):
    with JournaledQueue(qdir, QueueConfig(sync="always"), name="q") as q:
        r = q.reader("r")
        q.put_many([b"a", b"b", b"c"])
        for _ in range(3):
            r.commit(r.get(timeout=1))
    for path in _journal_files(qdir):
        os.unlink(path)  # e.g. a disk that lost the files, or an operator's mistake
    with JournaledQueue(qdir, QueueConfig(sync="always"), name="q") as q:
        new_id = q.put(b"d")
        assert new_id == 4  # not 1: ids 1..3 were seen and committed by reader r
        item = q.reader("r").get(timeout=1)
        assert (item.id, item.data) == (4, b"d")


def test_ids_continue_above_out_of_order_commits_when_the_tail_is_lost(qdir):
    with JournaledQueue(qdir, QueueConfig(sync="always", journal_size=4096), name="q") as q:
        r = q.reader("r")
        q.put_many([b"x" * 100 for _ in range(3)])
        first = r.get(timeout=1)
        second = r.get(timeout=1)
        third = r.get(timeout=1)
        r.commit(third)  # out of order: head stays at 1, done = {3}
        r.abort(first)
        r.abort(second)
    newest = _journal_files(qdir)[-1]
    with open(newest, "r+b") as f:  # lose the last record (a torn tail is cut on open)
        size = os.path.getsize(newest)
        f.truncate(size - 60)
    with JournaledQueue(qdir, QueueConfig(sync="always", journal_size=4096), name="q") as q:
        new_id = q.put(b"fresh")
        assert new_id >= 4  # id 3 was committed by r: it must never name another item
        r = q.reader("r")
        got = []
        while True:
            try:
                it = r.get(timeout=0.2)
            except Exception:
                break
            got.append((it.id, it.data))
            r.commit(it)
        assert (new_id, b"fresh") in got
        assert [i for i, _ in got] == sorted(i for i, _ in got)
