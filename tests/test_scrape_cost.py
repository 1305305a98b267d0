"""A scrape of a queue with thousands of readers costs its puts little (issue 35, point 11;
docs/design.md, "The cost of a scrape"): ``q.stats()`` takes the queue lock reader by reader, so
a put goes on in the middle of a snapshot; concurrent scrapes share one render, and nonstop
scraping renders at most a bounded share of the time; the faster metrics text is byte for byte
prometheus_client's, and the JSON made in pieces is ``json.dumps``'s."""

from __future__ import annotations

import json
import threading

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

import journaled.cli.scrapes as scrapes_module
import journaled.metrics as metrics_module
import journaled.stats as stats_module
from journaled import JournaledQueue, ReaderConfig
from journaled.cli.scrapes import SharedRender, dumps_in_turns, stats_dict
from journaled.cli.statuspage import History, status
from journaled.metrics import QueueCollector
from journaled.stats import QueueStats

# (the case is 3,000 readers; creating each reader writes and syncs its checkpoint and
# the registry, so 600 keep the test quick: the lock is released per reader whatever the count)
READERS = 600
WAIT = 30.0


def _between_readers(monkeypatch, then):  # type: ignore[no-untyped-def]
    """Run ``then(n)`` where ``q.stats()`` gives other threads their turn, after its n-th reader
    (:class:`journaled.stats.Turns`, ticked with the queue lock released)."""

    class Seam:
        def __init__(self) -> None:
            self.n = 0

        def tick(self) -> None:
            self.n += 1
            then(self.n)

    monkeypatch.setattr(stats_module, "Turns", Seam)


def test_a_put_completes_while_a_snapshot_of_many_readers_is_in_progress(tmp_path, monkeypatch) -> None:
    q = JournaledQueue(str(tmp_path / "jobs"))
    try:
        for i in range(READERS):
            q.reader(f"r{i:04d}")
        q.put(b"before")
        done: list[bool] = []

        def halfway(n: int) -> None:
            if n == READERS // 2:  # half the readers taken: a put of another thread gets through
                thread = threading.Thread(target=q.put, args=(b"during",))
                thread.start()
                thread.join(WAIT)
                done.append(not thread.is_alive())

        _between_readers(monkeypatch, halfway)
        snapshot = q.stats()
    finally:
        monkeypatch.undo()
        q.close()
    assert done == [True], "no put got through during the snapshot: the queue lock was held across it"
    # each reader's figures are its own instant: the put shows in the readers taken after it
    puts = [r.put for r in snapshot.readers]
    assert puts == [1] * (READERS // 2) + [2] * (READERS - READERS // 2)
    assert snapshot.next_id == 3 and len(snapshot.readers) == READERS


def test_puts_go_on_throughout_the_renders_of_the_metrics_and_the_status(tmp_path, monkeypatch) -> None:
    # the whole scrape, not only its snapshot: while the renders format thousands of readers'
    # figures they hold no queue lock, and give the other threads their turn every few readers
    # or lines (each turn here is where a put of another thread is made, and must complete)
    q = JournaledQueue(str(tmp_path / "jobs"))
    made: list[bool] = []
    ticks = [0]

    class Seam:
        def tick(self) -> None:
            ticks[0] += 1
            if ticks[0] % 499 == 0:
                thread = threading.Thread(target=q.put, args=(b"during",))
                thread.start()
                thread.join(WAIT)
                made.append(not thread.is_alive())

    try:
        for i in range(READERS):
            q.reader(f"r{i:04d}")
        history = History([q])
        history.stop.set()
        for module in (stats_module, metrics_module, scrapes_module):
            monkeypatch.setattr(module, "Turns", Seam)
        text = metrics_module.QueueCollector([q]).exposition()
        metrics_ticks = ticks[0]
        page = json.loads(dumps_in_turns(status([q], history, False), default=str))
    finally:
        monkeypatch.undo()
        q.close()
    assert made and all(made), f"{made.count(False)} of {len(made)} puts made in the renders did not complete"
    # turns at least once per reader and line, in each render
    assert metrics_ticks >= text.count(b"\n") - 200 and ticks[0] - metrics_ticks >= READERS
    # and the renders are whole
    assert text.count(b"journaled_reader_backlog_items{") == READERS
    assert len(page["queues"][0]["stats"]["readers"]) == READERS


def test_a_reader_removed_during_a_snapshot_is_left_out(tmp_path, monkeypatch) -> None:
    with JournaledQueue(str(tmp_path / "jobs")) as q:
        for name in ("a", "b", "c"):
            q.reader(name)
        _between_readers(monkeypatch, lambda n: q.remove_reader("c") if n == 1 else None)
        names = [r.name for r in q.stats().readers]
    assert names == ["a", "b"]


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_concurrent_scrapes_trigger_one_render() -> None:
    entered, release = threading.Event(), threading.Event()
    count = [0]

    def render() -> bytes:
        count[0] += 1
        entered.set()
        assert release.wait(WAIT)
        return b"answer %d" % count[0]

    shared = SharedRender(render)
    got: list[bytes] = []
    first = threading.Thread(target=lambda: got.append(shared.get()))
    first.start()
    assert entered.wait(WAIT)
    others = [threading.Thread(target=lambda: got.append(shared.get())) for _ in range(4)]
    for t in others:
        t.start()
    # every other caller is waiting for the render under way (a thread waits on the condition)
    waiters = shared._cond._waiters  # type: ignore[attr-defined]
    deadline = threading.Event()
    for _ in range(3000):
        if len(waiters) == 4:
            break
        deadline.wait(0.01)
    assert len(waiters) == 4 and shared.rendering
    release.set()
    for t in [first, *others]:
        t.join(WAIT)
    assert got == [b"answer 1"] * 5 and count[0] == 1 and shared.renders == 1
    assert not shared.rendering


def test_nonstop_scrapes_render_at_most_a_bounded_share_of_the_time() -> None:
    clock = _Clock()
    count = [0]

    def render() -> bytes:
        count[0] += 1
        clock.now += 2.0  # a render of two seconds
        return b"%d" % count[0]

    shared = SharedRender(render, share=0.1, min_reuse=0.25, clock=clock)
    assert shared.get() == b"1"
    clock.now += 17.9  # 9 times the render's time after it ended: still the same answer
    assert shared.get() == b"1"
    clock.now += 0.2
    assert shared.get() == b"2"
    shared.expire()  # the answer kept is dropped: the next scrape renders
    assert shared.get() == b"3"
    # a quick render is reused for min_reuse
    made = iter(range(100))
    fast = SharedRender(lambda: b"%d" % next(made), min_reuse=0.25, clock=clock)
    one = fast.get()
    clock.now += 0.2
    assert fast.get() == one
    clock.now += 0.1
    assert fast.get() != one


def test_a_render_that_fails_is_not_kept() -> None:
    answers: list[object] = [OSError("gone"), b"fine"]

    def render() -> bytes:
        value = answers.pop(0)
        if isinstance(value, Exception):
            raise value
        assert isinstance(value, bytes)
        return value

    shared = SharedRender(render)
    with pytest.raises(OSError):
        shared.get()
    assert shared.get() == b"fine" and shared.renders == 1


class _Fixed:
    """A queue whose stats are one snapshot, so that two renders see the same figures."""

    def __init__(self, snapshot: QueueStats) -> None:
        self.snapshot, self.name, self.closed = snapshot, snapshot.name, False

    def stats(self) -> QueueStats:
        return self.snapshot


def test_the_metrics_text_is_prometheus_clients_byte_for_byte(tmp_path) -> None:
    dead = JournaledQueue(str(tmp_path / "dead"))
    with JournaledQueue(str(tmp_path / "jobs")) as q:
        r = q.reader("r", ReaderConfig(dead_letter=dead, max_errors=1))
        q.reader("other")
        q.put_many([b"x" * 10] * 5)
        item = r.get(block=False)
        r.abort(item, delay=60)
        r.get(block=False)
        q.archive()
        from journaled.disk.bookmarks import write_bookmark

        write_bookmark(q.path, "spark", 2)
        snapshot = q.stats()
    dead.close()
    # names of readers are plain, so make the label escaping show: quotes, backslashes, newlines
    odd = attrs.evolve(snapshot.readers[0], name='we"ird\\name\nx')
    snapshot = attrs.evolve(snapshot, readers=(odd, *snapshot.readers[1:]))
    collector = QueueCollector([_Fixed(snapshot)])
    registry = CollectorRegistry()
    registry.register(collector)
    expected = generate_latest(registry)
    assert collector.exposition() == expected
    assert b"journaled_bookmark_lag_items" in expected and b'we\\"ird\\\\name\\nx' in expected


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=80) | st.dictionaries(st.text(max_size=4), inner, max_size=80),
    max_leaves=400,
)


@settings(max_examples=60, deadline=None)
@given(json_values)
def test_json_made_in_turns_is_json_dumps_text(value) -> None:  # type: ignore[no-untyped-def]
    assert dumps_in_turns(value, default=str) == json.dumps(value, default=str)


def test_json_in_turns_applies_default_and_keeps_non_str_keys() -> None:
    class Odd:
        def __str__(self) -> str:
            return "odd"

    value = {"a": [Odd()] * 100, "b": {1: "one", 2: [Odd()]}, "c": tuple(range(200))}
    assert dumps_in_turns(value, default=str) == json.dumps(value, default=str)


def test_the_status_pages_stats_dict_is_attrs_asdict(tmp_path) -> None:
    with JournaledQueue(str(tmp_path / "jobs")) as q:
        for name in ("a", "b"):
            q.reader(name)
        q.put(b"x")
        q.reader("a").get(block=False)
        snapshot = q.stats()
    assert stats_dict(snapshot) == attrs.asdict(snapshot, recurse=True)
    assert list(stats_dict(snapshot)) == list(attrs.asdict(snapshot, recurse=True))
