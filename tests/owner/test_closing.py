"""Closing: idempotent, and a concurrent second close returns only after the directory is free."""

from __future__ import annotations

import fcntl
import os
import threading

from journaled import JournaledQueue, QueueConfig
from journaled.disk.dirlock import LOCK_FILE


def _directory_is_free(qdir: str) -> bool:
    """True when no JournaledQueue holds the directory (a shared probe never blocks another)."""
    fd = os.open(os.path.join(qdir, LOCK_FILE), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_concurrent_close_returns_only_when_the_directory_is_released(qdir):
    for _ in range(20):
        q = JournaledQueue(qdir, QueueConfig(sync=0.01), name="q")
        q.reader("r")
        q.put_many([b"x"] * 100)
        barrier = threading.Barrier(3)
        held_after_close: list[bool] = []

        def closer() -> None:
            barrier.wait()
            q.close()
            held_after_close.append(not _directory_is_free(qdir))

        threads = [threading.Thread(target=closer) for _ in range(2)]
        for t in threads:
            t.start()
        barrier.wait()
        for t in threads:
            t.join(30)
        assert held_after_close == [False, False]


def test_close_twice_is_harmless(qdir):
    q = JournaledQueue(qdir, name="q")
    q.close()
    q.close()
    assert q.closed
