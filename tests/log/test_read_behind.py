"""Read-behind: a reader's memory stays within max_memory however far behind it is, and order
and exactly-once delivery hold across the memory/disk boundary — with concurrent puts and gets,
fan-out readers at different distances behind, and reopen in the middle."""

from __future__ import annotations

import threading
from collections import deque

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from journaled import Empty, JournaledQueue, QueueConfig, ReaderConfig

SMALL_FILES = QueueConfig(sync="never", journal_size=4096, checkpoint_interval=0.05)


def payload(i: int, size: int = 24) -> bytes:
    head = b"%08d:" % i
    return head + b"x" * max(0, size - len(head))


def ident(data: bytes) -> int:
    return int(data[:8])


def test_memory_stays_within_max_memory_far_behind(qdir):
    with JournaledQueue(qdir, SMALL_FILES) as q:
        r = q.reader("r", ReaderConfig(max_memory=200))
        q.put_many([payload(i) for i in range(2000)])
        st = r.stats()
        assert st.bytes_in_memory <= 200 and st.items_on_disk >= 2000 - 200 // 24
        seen = []
        while True:
            try:
                item = r.get(block=False)
            except Empty:
                break
            assert r.stats().bytes_in_memory <= 200
            seen.append(ident(item.data))
            r.commit(item)
        assert seen == list(range(2000))


def test_one_item_larger_than_max_memory_is_still_delivered(qdir):
    with JournaledQueue(qdir, SMALL_FILES) as q:
        r = q.reader("r", ReaderConfig(max_memory=10))
        q.put_many([payload(0, 50), payload(1, 50), payload(2, 5)])
        got = [r.get(block=False) for _ in range(3)]
        assert [ident(i.data) for i in got] == [0, 1, 2]


def test_memory_bound_holds_after_reopen_with_a_large_backlog(qdir):
    with JournaledQueue(qdir, SMALL_FILES) as q:
        q.reader("r", ReaderConfig(max_memory=300))
        q.put_many([payload(i) for i in range(1500)])
    with JournaledQueue(qdir, SMALL_FILES) as q:
        r = q.reader("r", ReaderConfig(max_memory=300))
        for i in range(1500):
            item = r.get(block=False)
            assert ident(item.data) == i
            assert r.stats().bytes_in_memory <= 300
            r.commit(item)


def test_aborts_at_the_memory_disk_boundary_keep_order(qdir):
    with JournaledQueue(qdir, SMALL_FILES) as q:
        r = q.reader("r", ReaderConfig(max_memory=60))
        q.put_many([payload(i) for i in range(30)])
        a, b = r.get(block=False), r.get(block=False)
        q.put_many([payload(i) for i in range(30, 40)])
        r.abort(b)
        r.abort(a)
        out = []
        for _ in range(40):
            item = r.get(block=False)
            out.append(ident(item.data))
            r.commit(item)
        assert out == list(range(40))


def _consume(reader, n, out, errors):
    try:
        for _ in range(n):
            item = reader.get(timeout=60)
            out.append(ident(item.data))
            reader.commit(item)
    except Exception as exc:  # surfaced by the test thread
        errors.append(exc)


def test_concurrent_puts_and_gets_with_fan_out_readers_at_different_distances(qdir):
    n = 2000
    with JournaledQueue(qdir, SMALL_FILES) as q:
        live = q.reader("live", ReaderConfig(max_memory=100_000))
        near = q.reader("near", ReaderConfig(max_memory=120))
        far = q.reader("far", ReaderConfig(max_memory=50))
        q.put_many([payload(i) for i in range(500)])  # "far" starts 500 behind
        outs: dict[str, list[int]] = {"live": [], "near": []}
        errors: list[Exception] = []
        threads = [
            threading.Thread(target=_consume, args=(live, n, outs["live"], errors)),
            threading.Thread(target=_consume, args=(near, n, outs["near"], errors)),
        ]
        for t in threads:
            t.start()
        far_out: list[int] = []
        for i in range(500, n, 50):
            q.put_many([payload(k) for k in range(i, i + 50)])
            for _ in range(20):  # far reader consumes slower than the puts
                item = far.get(timeout=60)
                far_out.append(ident(item.data))
                far.commit(item)
        for t in threads:
            t.join(120)
        while len(far_out) < n:
            item = far.get(timeout=60)
            far_out.append(ident(item.data))
            far.commit(item)
        assert not errors
        assert outs["live"] == list(range(n))
        assert outs["near"] == list(range(n))
        assert far_out == list(range(n))


def test_many_getters_on_one_read_behind_reader_get_each_item_exactly_once(qdir):
    n = 2000
    with JournaledQueue(qdir, SMALL_FILES) as q:
        r = q.reader("r", ReaderConfig(max_memory=64))
        q.put_many([payload(i) for i in range(n // 2)])
        outs: list[list[int]] = [[] for _ in range(4)]
        errors: list[Exception] = []
        threads = [threading.Thread(target=_consume, args=(r, n // 4, o, errors)) for o in outs]
        for t in threads:
            t.start()
        for i in range(n // 2, n, 100):
            q.put_many([payload(k) for k in range(i, i + 100)])
        for t in threads:
            t.join(120)
        assert not errors
        assert sorted(x for o in outs for x in o) == list(range(n))
        for o in outs:
            assert o == sorted(o)  # each getter sees increasing ids


def test_reopen_in_the_middle_of_read_behind_loses_and_repeats_nothing(qdir):
    cfg = ReaderConfig(max_memory=80)
    got: list[int] = []
    with JournaledQueue(qdir, SMALL_FILES) as q:
        r = q.reader("r", cfg)
        q.put_many([payload(i) for i in range(600)])
        for _ in range(250):
            item = r.get(block=False)
            got.append(ident(item.data))
            r.commit(item)
        open_read = r.get(block=False)  # uncommitted: comes back after reopen
    with JournaledQueue(qdir, SMALL_FILES) as q:
        r = q.reader("r", cfg)
        q.put_many([payload(i) for i in range(600, 700)])
        while True:
            try:
                item = r.get(block=False)
            except Empty:
                break
            got.append(ident(item.data))
            r.commit(item)
    assert ident(open_read.data) == 250
    assert got == list(range(700))


class ReadBehindMachine(RuleBasedStateMachine):
    """A model of per-reader delivery order (aborted items first, then the rest by id), checked
    against readers with tiny max_memory over many small journal files, across reopen."""

    NAMES = ("a", "b", "c")
    MEMORY = {"a": 1, "b": 40, "c": 100_000}

    def __init__(self) -> None:
        super().__init__()
        self.q: JournaledQueue | None = None
        self.dir = ""
        self.next = 0
        self.waiting: dict[str, deque[int]] = {}
        self.opened: dict[str, dict[int, object]] = {}

    @initialize(data=st.data())
    def setup(self, data) -> None:
        import tempfile

        self.dir = tempfile.mkdtemp(prefix="rb-machine-")
        self._open()
        for n in self.NAMES:
            self.waiting[n] = deque()
            self.opened[n] = {}

    def _open(self) -> None:
        self.q = JournaledQueue(self.dir, QueueConfig(sync="never", journal_size=512))
        self.readers = {n: self.q.reader(n, ReaderConfig(max_memory=self.MEMORY[n])) for n in self.NAMES}

    @rule(k=st.integers(1, 12), size=st.integers(0, 60))
    def put(self, k: int, size: int) -> None:
        assert self.q is not None
        self.q.put_many([payload(self.next + j, size) for j in range(k)])
        for n in self.NAMES:
            self.waiting[n].extend(range(self.next, self.next + k))
        self.next += k

    @rule(name=st.sampled_from(NAMES))
    def get(self, name: str) -> None:
        r = self.readers[name]
        if not self.waiting[name]:
            try:
                r.get(block=False)
            except Empty:
                return
            raise AssertionError("delivered an item the model does not have")
        item = r.get(block=False)
        assert ident(item.data) == self.waiting[name].popleft()
        self.opened[name][ident(item.data)] = item

    @precondition(lambda self: any(self.opened.values()))
    @rule(data=st.data(), commit=st.booleans())
    def finish(self, data, commit: bool) -> None:
        name = data.draw(st.sampled_from([n for n in self.NAMES if self.opened[n]]))
        key = data.draw(st.sampled_from(sorted(self.opened[name])))
        item = self.opened[name].pop(key)
        # The fourth abort of an item starts the built-in retry backoff (ReaderConfig.retry_delay
        # None: at once for the first three aborts, then 0.05 s and up; core/retry.py), which
        # this model of order does not play: an item aborted three times is committed instead.
        # (A run under another seed found the gap: the backed-off item was not delivered at once.)
        commit = commit or item.error_count >= 3
        if commit:
            self.readers[name].commit(item)
        else:
            self.readers[name].abort(item)
            self.waiting[name].appendleft(key)

    @rule()
    def reopen(self) -> None:
        assert self.q is not None
        self.q.close()
        for n in self.NAMES:  # open reads come back; everything uncommitted in id order
            self.waiting[n] = deque(sorted(set(self.waiting[n]) | set(self.opened[n])))
            self.opened[n] = {}
        self._open()

    @invariant()
    def counts_match_the_model(self) -> None:
        if self.q is None:
            return
        for n, r in self.readers.items():
            st_ = r.stats()
            assert st_.items_waiting == len(self.waiting[n])
            assert st_.open_reads == len(self.opened[n])
            assert st_.items_in_memory + st_.items_on_disk == st_.items_waiting

    def teardown(self) -> None:
        if self.q is not None:
            self.q.close()
        import shutil

        shutil.rmtree(self.dir, ignore_errors=True)


ReadBehindMachine.TestCase.settings = settings(
    max_examples=10,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_read_behind_state_machine = ReadBehindMachine.TestCase
