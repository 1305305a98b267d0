"""A reader's backlog bytes over compressed units (issue 39): after a reopen the estimate from
file sizes says too little of a compressed journal (a unit holds ~5x its size), so a reader
reads the real figure once (for ``max_size``, or ``stats()``), and ``stats()`` never calls an
estimate exact."""

from __future__ import annotations

import json

import pytest

from journaled import Full, JournaledQueue, QueueConfig, ReaderConfig
from journaled.format import compressed

pytestmark = pytest.mark.skipif(not compressed.available(), reason="needs a zstd binding (the zstd extra)")


def line(i: int) -> bytes:
    event = {"level": "info", "host": "web-%d" % (i % 8), "msg": "GET /index.html", "i": i}
    return json.dumps(event).encode()


def fill(q: JournaledQueue, start: int) -> int:
    """put_many batches of 50 until the reader is full; how many went in."""
    n = 0
    with pytest.raises(Full):
        while n < 100_000:
            q.put_many([line(start + n + j) for j in range(50)])
            n += 50
    return n


def test_max_size_holds_across_a_reopen_of_a_compressed_queue(qdir):
    # found by using the product: after a reopen the reader's backlog read 0 bytes, "exact",
    # and took another 250 items (17,500 bytes) past a max_size it was full at
    with JournaledQueue(qdir, QueueConfig(compression="zstd", sync="never")) as q:
        q.reader("r", ReaderConfig(max_size=20_000))
        n = fill(q, 0)
        before = q.stats().readers[0].backlog_bytes
    with JournaledQueue(qdir, QueueConfig(compression="zstd", sync="never")) as q:
        with pytest.raises(Full):
            q.put_many([line(n + j) for j in range(50)])
        s = q.stats().readers[0]
        assert (s.backlog_bytes, s.backlog_bytes_exact) == (before, True)


def test_an_estimated_backlog_is_never_called_exact_nor_under_the_real_bytes(qdir):
    with JournaledQueue(qdir, QueueConfig(sync="never")) as q:
        q.reader("r")
        q.put_many([line(i) for i in range(500)])
    with JournaledQueue(qdir, QueueConfig(sync="never")) as q:
        s = q.stats().readers[0]
        assert s.backlog_items == 500
        assert not s.backlog_bytes_exact, f"{s.backlog_bytes} bytes (an estimate) called exact"
        assert s.backlog_bytes >= sum(len(line(i)) for i in range(500))


def test_a_compressed_backlog_after_a_reopen_is_read_once_and_exact_without_max_size(qdir):
    # found by using the product: the estimate from file sizes was 0 (a unit holds ~5x its size
    # and each record's overhead is taken off), shown by stats() and `journaled stat`
    with JournaledQueue(qdir, QueueConfig(compression="zstd", sync="never")) as q:
        q.reader("r")
        q.put_many([line(i) for i in range(500)])
    with JournaledQueue(qdir, QueueConfig(compression="zstd", sync="never")) as q:
        s = q.stats().readers[0]
        assert s.backlog_items == 500
        assert (s.backlog_bytes, s.backlog_bytes_exact) == (sum(len(line(i)) for i in range(500)), True)
