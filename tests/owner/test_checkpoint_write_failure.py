"""A checkpoint whose write fails (a full disk) is not silently skipped: the next checkpoint
writes the reader's new head."""

from __future__ import annotations

import errno

import pytest

from journaled import JournaledQueue, QueueConfig
from journaled.disk import checkpointfiles as ckp

QUIET = QueueConfig(sync="never", checkpoint_interval=3600.0)


def test_checkpoint_write_failure_is_retried_by_the_next_checkpoint(qdir, monkeypatch):
    with JournaledQueue(qdir, QUIET) as q:
        r = q.reader("r")
        q.put_many([b"a", b"b"])
        r.commit(r.get(block=False))
        real = ckp.write_checkpoint

        def full_disk(path: str, data: object, mode: int) -> None:
            raise OSError(errno.ENOSPC, "injected: no space left")

        monkeypatch.setattr(ckp, "write_checkpoint", full_disk)
        with pytest.raises(OSError):
            q.checkpoint()
        monkeypatch.setattr(ckp, "write_checkpoint", real)
        q.checkpoint()  # the disk has room again: the reader's new head must reach it now
        on_disk = ckp.read_checkpoint(ckp.checkpoint_path(q.path, q.name, "r"))
        assert on_disk is not None and on_disk.head == r.head == 2
        q.put(b"c")  # keep the close from being the thing that writes it
