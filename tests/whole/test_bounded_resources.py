"""Resources stay bounded whatever the journal holds: open file descriptors whatever the number
of journal files and readers, and a reader's memory (and the work of one read-behind refill)
whatever the item size, empty items included."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

from conftest import ready_items
from journaled import JournaledQueue, QueueConfig, ReaderConfig
from journaled.config import ReaderConfig as CoreConfig
from journaled.core.readercore import ITEM_OVERHEAD, ReaderCore
from journaled.disk import fileio
from journaled.format.record import PUT_OVERHEAD, Put
from journaled.format.smallfiles import CheckpointData
from journaled.log.journal import Cursor
from journaled.log.state import READ_FDS

# one 40-byte item per journal file: hundreds of files from a few hundred puts
TINY_FILES = QueueConfig(sync="never", journal_size=128, checkpoint_interval=3600)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# ----------------------------------------------------------------------------- file descriptors
_CHILD = textwrap.dedent(
    """
    import resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    from journaled import Empty, JournaledQueue, QueueConfig, ReaderConfig

    cfg = QueueConfig(sync="never", journal_size=128, checkpoint_interval=3600)
    with JournaledQueue(sys.argv[1], cfg) as q:
        q.reader("pinned")  # created at the start, never reads: nothing can be archived
        for i in range(800):
            q.put(b"%08d" % i + b"x" * 32)
    with JournaledQueue(sys.argv[1], cfg) as q:
        walker = q.reader("walker", ReaderConfig(start="earliest"))  # catching up from disk
        files = q.stats().journal_files
        got = 0
        while True:
            try:
                item = walker.get(block=False)
            except Empty:
                break
            assert item.data[:8] == b"%08d" % got, (item.data, got)
            walker.commit(item)
            got += 1
    print(files, got)
    """
)


def test_a_reader_walks_hundreds_of_pinned_journal_files_under_a_64_fd_limit(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path / "q")], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    files, got = map(int, proc.stdout.split())
    assert files >= 500 and got == 800


def test_reading_through_500_files_holds_a_bounded_number_of_descriptors(tmpfs_qdir):
    with JournaledQueue(tmpfs_qdir, TINY_FILES) as q:
        q.reader("pinned")
        walker = q.reader("walker", ReaderConfig(max_memory=1))  # read-behind from the first item
        q.put_many([b"%08d" % i + b"x" * 32 for i in range(1000)])
        assert q.stats().journal_files >= 500
        before = open_fds()
        peak = before
        for n, item in enumerate(ready_items(walker)):
            assert item.data[:8] == b"%08d" % n
            walker.commit(item)
            peak = max(peak, open_fds())
        assert n == 999
        assert peak <= before + READ_FDS


def test_descriptors_evicted_from_the_cache_are_reopened_when_read_again(tmpfs_qdir):
    with JournaledQueue(tmpfs_qdir, TINY_FILES) as q:
        first = q.reader("first", ReaderConfig(max_memory=1))
        q.put_many([b"%08d" % i + b"x" * 32 for i in range(200)])
        second = q.reader("second", ReaderConfig(max_memory=1, start="earliest"))
        # interleaved: each reader's next file was evicted by the other's walk, or not yet read
        a, b = ready_items(first), ready_items(second)
        for n in range(200):
            for it, r in ((next(a), first), (next(b), second)):
                assert it.data[:8] == b"%08d" % n
                r.commit(it)


# ----------------------------------------------------------------------------- memory
def test_empty_items_are_charged_a_per_item_overhead_against_max_memory(tmpfs_qdir):
    bound = 64 * 1024
    with JournaledQueue(tmpfs_qdir, QueueConfig(sync="never")) as q:
        r = q.reader("r", ReaderConfig(max_memory=bound))
        q.put_many([b""] * 20_000)
        st = r.stats()
        assert st.items_in_memory <= bound // ITEM_OVERHEAD + 1
        assert st.items_in_memory + st.items_on_disk == 20_000
        n = 0
        for item in ready_items(r):
            assert item.id == n + 1
            r.commit(item)
            n += 1
            if n % 997 == 0:
                assert r.stats().items_in_memory <= bound // ITEM_OVERHEAD + 1
        assert n == 20_000


def test_the_first_get_after_reopen_reads_back_no_more_than_max_memory_holds(tmpfs_qdir):
    bound = 64 * 1024
    with JournaledQueue(tmpfs_qdir, QueueConfig(sync="never")) as q:
        q.reader("r", ReaderConfig(max_memory=bound))
        q.put_many([b""] * 50_000)
    with JournaledQueue(tmpfs_qdir, QueueConfig(sync="never")) as q:
        r = q.reader("r", ReaderConfig(max_memory=bound))
        item = r.get(block=False)
        assert item.id == 1
        assert r.stats().items_in_memory <= bound // ITEM_OVERHEAD + 1


class CountingLog:
    """A LogSource over PUT records in a list that counts every record it decodes for a reader."""

    def __init__(self, payloads: list[bytes]) -> None:
        self.records = [Put(k, PUT_OVERHEAD + len(p), k + 1, 1000, 0, p) for k, p in enumerate(payloads)]
        self.decoded = 0

    @property
    def next_id(self) -> int:
        return len(self.records) + 1

    def locate(self, item_id: int, hint: Cursor | None = None) -> Cursor:
        return Cursor(0, item_id - 1, item_id)

    def read(
        self, cursor: Cursor, max_bytes: int = 1 << 20, max_items: int = 1 << 30
    ) -> tuple[list[Put], Cursor]:
        out: list[Put] = []
        k, used = cursor.next_id - 1, 0
        while k < len(self.records) and len(out) < max_items and (not out or used < max_bytes):
            out.append(self.records[k])
            used += len(self.records[k].payload)
            k += 1
        self.decoded += len(out)
        return out, Cursor(0, k, k + 1)

    def hint(self, item_id: int) -> tuple[int, int]:
        return 0, 0

    compressed = False  # plain PUT records: their sizes bound their payload

    def bytes_from(self, item_id: int, hint_ms: int = 0, hint_offset: int = 0) -> int:
        return sum(r.size for r in self.records[item_id - 1 :])

    def file_created_s(self, item_id: int) -> float:
        return 1.0


def core_over(log: CountingLog, max_memory: int) -> ReaderCore:
    return ReaderCore(
        "r",
        CoreConfig(max_memory=max_memory),
        CheckpointData(1),
        threading.Lock(),
        log,  # type: ignore[arg-type]
        head_moved=lambda: None,
        wake_engine=lambda: None,
    )


def test_one_refill_decodes_at_most_the_items_max_memory_can_hold():
    for max_memory in (1, 1000, 64 * 1024, 1024 * 1024):
        log = CountingLog([b""] * 200_000)
        core = core_over(log, max_memory)
        assert core.take() is not None
        held = max_memory // ITEM_OVERHEAD + 1
        assert len(core.mem) <= held
        assert log.decoded <= held + 1  # what memory holds, and the item handed out


def test_a_refill_never_holds_more_than_max_memory_counting_the_overhead():
    sizes = [0, 1, 50, 300, 0, 0, 7, 1000] * 500
    log = CountingLog([b"x" * s for s in sizes])
    core = core_over(log, 4096)
    delivered = 0
    while True:
        item = core.take()
        if item is None:
            break
        charged = core.mem_bytes + ITEM_OVERHEAD * len(core.mem)
        assert charged <= 4096 or len(core.mem) <= 1
        assert len(item.data) == sizes[delivered]
        core.commit(item)
        delivered += 1
    assert delivered == len(sizes)


class SlowReads(fileio.FileOps):
    """A pread that takes its time when asked to: evictions land in the middle of it."""

    def __init__(self) -> None:
        self.slow = threading.Event()

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        if self.slow.is_set():
            time.sleep(0.3)
        return super().pread(fd, size, offset)


def test_a_descriptor_evicted_while_a_read_uses_it_is_closed_only_after_that_read(qdir):
    ops = SlowReads()
    with fileio.use(ops), JournaledQueue(qdir, TINY_FILES) as q:
        q.reader("pinned")
        q.put_many([b"%08d" % i + b"x" * 32 for i in range(100)])
        files = q.journal.files
        assert len(files) > 3 * READ_FDS
        first = files[0]
        got: list[object] = []

        def read_first_file() -> None:
            try:
                got.append(
                    q.journal.read(Cursor(first.ms, first.header.size, first.first_id), max_items=1)[0]
                )
            except BaseException as exc:  # noqa: BLE001 - asserted below
                got.append(exc)

        ops.slow.set()
        reader = threading.Thread(target=read_first_file, daemon=True)
        reader.start()
        time.sleep(0.1)  # the read is inside its pread now
        ops.slow.clear()
        # every other file read once: the first file's descriptor is evicted from the cache, and
        # the descriptors opened meanwhile would reuse its number had it been closed
        for jf in files[1 : 2 * READ_FDS]:
            [rec], _ = q.journal.read(Cursor(jf.ms, jf.header.size, jf.first_id), max_items=1)
            assert rec.id == jf.first_id
        reader.join(10)
        [result] = got
        assert isinstance(result, list) and [rec.payload[:8] for rec in result] == [b"00000000"], result
