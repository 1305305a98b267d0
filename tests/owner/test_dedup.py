"""De-duplication by key (``QueueConfig(dedup_window=...)``): a put whose key was put within the
window returns the first put's id and stores nothing; the window is rebuilt from the journal at
open (so it survives a close and a kill -9), and keys older than the window are forgotten."""

from __future__ import annotations

import asyncio
import math
import threading
import time

import pytest

from journaled import JournaledQueue, QueueConfig, ReaderConfig
from journaled.errors import Empty, Full
from journaled.owner import putpath
from journaled.owner.dedup import KeyWindow
from support.child import killed_after

DEDUP = QueueConfig(dedup_window=60.0)


class _Clock:
    """``time_ns`` for journaled.owner.putpath, moved by hand."""

    def __init__(self) -> None:
        self.ns = time.time_ns()

    def time_ns(self) -> int:
        return self.ns

    def advance(self, seconds: float) -> None:
        self.ns += int(seconds * 1e9)


def drain(q: JournaledQueue, name: str = "r") -> list[tuple[int, bytes, bytes | None]]:
    r = q.reader(name)
    out = []
    while True:
        try:
            item = r.get(block=False)
        except Empty:
            return out
        out.append((item.id, item.data, item.key))
        r.commit(item)


@pytest.mark.parametrize("bad", [0, -1.0, -2, math.nan, math.inf, True, "60"])
def test_dedup_window_must_be_a_finite_positive_number(bad: object) -> None:
    with pytest.raises((ValueError, TypeError)):  # -1 (an int) is the one other value: remove it
        QueueConfig(dedup_window=bad)  # type: ignore[arg-type]


def test_dedup_is_off_by_default(tmp_path) -> None:
    assert QueueConfig().dedup_window is None
    with JournaledQueue(tmp_path / "q") as q:
        q.reader("r")
        a, b = q.put(b"x", key=b"k"), q.put(b"y", key=b"k")
        assert a != b
        assert [d for _, d, _ in drain(q)] == [b"x", b"y"]


def test_a_key_put_again_within_the_window_returns_the_first_id_and_stores_nothing(tmp_path) -> None:
    with JournaledQueue(tmp_path / "q", DEDUP) as q:
        q.reader("r")
        first = q.put(b"one", key=b"order-1")
        assert q.put(b"one again", key=b"order-1") == first
        other = q.put(b"two", key=b"order-2")
        assert q.put(b"plain") == other + 1  # a put without a key is never a duplicate
        assert q.stats().put == 3
        assert q.reader("r").stats().put == 3
        assert drain(q) == [
            (first, b"one", b"order-1"),
            (other, b"two", b"order-2"),
            (other + 1, b"plain", None),
        ]


def test_put_many_returns_one_id_per_item_and_stores_each_key_once(tmp_path) -> None:
    with JournaledQueue(tmp_path / "q", DEDUP) as q:
        q.reader("r")
        a = q.put(b"a", key=b"ka")
        ids = q.put_many([b"a2", b"b", b"c", b"b2", b"d"], keys=[b"ka", b"kb", None, b"kb", b"kd"])
        assert ids == [a, a + 1, a + 2, a + 1, a + 3]
        assert q.stats().put == 4
        assert [d for _, d, _ in drain(q)] == [b"a", b"b", b"c", b"d"]
        assert q.put_many([b"x", b"y"], keys=[b"ka", b"kd"]) == [a, a + 3]  # nothing stored
        assert q.stats().put == 4


def test_a_key_repeated_in_the_first_put_many_of_a_new_queue_is_stored_once(tmp_path) -> None:
    with JournaledQueue(tmp_path / "q", DEDUP) as q:
        assert q.put_many([b"a", b"b", b"c"], keys=[b"k", b"k", b"j"]) == [1, 1, 2]
        assert q.stats().put == 2


def test_dedup_false_stores_a_duplicate_and_the_window_keeps_the_first_id(tmp_path) -> None:
    with JournaledQueue(tmp_path / "q", DEDUP) as q:
        q.reader("r")
        first = q.put(b"a", key=b"k")
        redrive = q.put(b"a", key=b"k", dedup=False)
        many = q.put_many([b"b", b"c"], keys=[b"k", b"k"], dedup=False)
        assert redrive == first + 1 and many == [first + 2, first + 3]
        assert q.put(b"again", key=b"k") == first
        assert [d for _, d, _ in drain(q)] == [b"a", b"a", b"b", b"c"]


def test_a_duplicate_does_not_count_toward_max_items(tmp_path) -> None:
    with JournaledQueue(tmp_path / "q", DEDUP) as q:
        q.reader("r", ReaderConfig(max_items=2))
        q.put(b"a", key=b"ka")
        q.put(b"b", key=b"kb")
        assert q.put(b"a", key=b"ka") == 1  # the queue is full, but nothing is to be stored
        with pytest.raises(Full):
            q.put(b"c", key=b"kc")


def test_a_key_older_than_the_window_is_stored_again(tmp_path, monkeypatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(putpath, "CLOCK", clock)
    with JournaledQueue(tmp_path / "q", QueueConfig(dedup_window=10.0)) as q:
        first = q.put(b"a", key=b"k")
        clock.advance(9.9)
        assert q.put(b"a", key=b"k") == first
        clock.advance(0.2)  # 10.1 s after the first put
        second = q.put(b"a", key=b"k")
        assert second == first + 1
        clock.advance(9.9)  # the window now runs from the second put
        assert q.put(b"a", key=b"k") == second


def test_the_window_survives_a_close_and_a_reopen(tmp_path) -> None:
    path = tmp_path / "q"
    with JournaledQueue(path, QueueConfig(dedup_window=60.0, journal_size=4096)) as q:
        q.reader("r")
        ids = q.put_many([b"x" * 300 for _ in range(40)], keys=[b"k%d" % i for i in range(40)])
        assert len(q.journal.files) > 1  # the keys are spread over several journal files
    with JournaledQueue(path, DEDUP) as q:
        assert q.put_many([b"y"] * 40, keys=[b"k%d" % i for i in range(40)]) == ids
        assert q.put(b"new", key=b"k40") == ids[-1] + 1
        assert len(drain(q)) == 41
    with JournaledQueue(path) as q:  # the window is stored with the queue: a later owner keeps it
        assert q.put(b"z", key=b"k0") == ids[0]
    with JournaledQueue(path, QueueConfig(dedup_window=-1)) as q:  # -1 removes it
        assert q.put(b"z", key=b"k0") == ids[-1] + 2
    with JournaledQueue(path) as q:  # and it stays removed
        assert q.put(b"z", key=b"k1") == ids[-1] + 3


def test_an_owner_taking_the_queue_over_without_the_window_applies_the_stored_one(tmp_path) -> None:
    """What a client process that takes the queue over does: it opens with its own QueueConfig,
    which says nothing of de-duplication, and the stored window still holds."""
    import subprocess
    import sys
    import textwrap

    from support.paths import ROOT

    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(dedup_window=3600.0)) as q:
        first = q.put(b"a", key=b"order-1")
    code = textwrap.dedent(
        f"""
        from journaled import JournaledQueue
        with JournaledQueue({path!r}) as q:
            print(q.put(b"again", key=b"order-1"), q.stats().next_id)
        """
    )
    import os

    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=ROOT),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(first), str(first + 1)]  # the first id, nothing stored


def test_reopen_reads_back_only_the_window(tmp_path, monkeypatch) -> None:
    path = tmp_path / "q"
    clock = _Clock()
    monkeypatch.setattr(putpath, "CLOCK", clock)
    with JournaledQueue(path, QueueConfig(dedup_window=10.0)) as q:
        old = q.put(b"old", key=b"old")
        clock.advance(5)
        young = q.put(b"young", key=b"young")
    clock.advance(6)  # "old" is 11 s old, "young" 6 s
    with JournaledQueue(path, QueueConfig(dedup_window=10.0)) as q:
        assert q.put(b"young", key=b"young") == young
        assert q.put(b"old", key=b"old") == young + 1 != old


OWNER = """
import sys
from journaled import JournaledQueue, QueueConfig
q = JournaledQueue(sys.argv[1], QueueConfig(dedup_window=60.0, sync="never"))
ids = q.put_many([b"p%d" % i for i in range(100)], keys=[b"k%d" % i for i in range(100)])
print("ids", ids[0], ids[-1], flush=True)
sys.stdin.readline()  # killed here
"""


def test_the_window_survives_a_kill_of_the_owner(tmp_path) -> None:
    path = str(tmp_path / "q")
    first, last = (int(v) for v in killed_after(OWNER, "ids", path))
    with JournaledQueue(path, DEDUP) as q:
        q.reader("r", ReaderConfig(start="earliest"))
        assert q.put_many([b"again"] * 100, keys=[b"k%d" % i for i in range(100)]) == list(
            range(first, last + 1)
        )
        assert q.stats().put == 0
        assert len(drain(q)) == 100


def test_the_key_window_forgets_in_add_order() -> None:
    w = KeyWindow(1.0)
    for i in range(5000):
        w.add(b"k%d" % i, i, 1000 + i)
    w.add(b"k0", 99, 7000)  # a key already there keeps its first id
    assert w.find(b"k0") == 0
    w.expire(1000 + 1000 + 2500)  # everything added before 3500 goes
    assert len(w) == 2500
    assert w.find(b"k2499") is None and w.find(b"k2500") == 2500
    w.expire(10_000)
    assert len(w) == 0


def test_aput_and_aput_many_take_the_put_keywords(tmp_path) -> None:
    async def main(q: JournaledQueue) -> tuple[int, int, list[int], list[int]]:
        a = await q.aput(b"a", key=b"k", headers={"h": b"v"}, delay=0)
        b = await q.aput(b"a", key=b"k", dedup=False)
        many = await q.aput_many([b"x", b"y"], keys=[b"k", b"ky"], headers={"h": b"w"})
        forced = await q.aput_many([b"z"], keys=[b"k"], dedup=False)
        return a, b, many, forced

    with JournaledQueue(tmp_path / "q", DEDUP) as q:
        q.reader("r")
        a, b, many, forced = asyncio.run(main(q))
        assert (b, many, forced) == (a + 1, [a, a + 2], [a + 3])
        item = q.reader("r").get(block=False)
        assert (item.key, dict(item.headers)) == (b"k", {"h": b"v"})


def test_threads_putting_the_same_keys_store_each_once_and_get_the_same_ids(tmp_path) -> None:
    keys = [b"k%d" % i for i in range(300)]
    results: list[list[int]] = []

    def worker(q: JournaledQueue) -> None:
        ids = []
        for i in range(0, len(keys), 7):  # batches that cut the keys differently than put() does
            ids += q.put_many([b"x"] * len(keys[i : i + 7]), keys=keys[i : i + 7])
        results.append(ids)

    with JournaledQueue(tmp_path / "q", DEDUP) as q:
        threads = [threading.Thread(target=worker, args=(q,)) for _ in range(3)]
        threads.append(threading.Thread(target=lambda: results.append([q.put(b"y", key=k) for k in keys])))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert q.stats().put == len(keys)
        assert len(results) == 4 and all(r == results[0] for r in results)
        assert sorted(results[0]) == list(range(1, len(keys) + 1))
