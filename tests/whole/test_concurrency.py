"""Many producers, many consumers, two readers: exactly once per reader, order kept.

4 producer threads put 200k items between them; 2 readers each have 4 consumer threads doing
get+commit.  Within the crash-free run every reader must get every item exactly once.  Order:
a reader hands items out in id order (= put order), and a producer's puts get increasing ids,
so every consumer thread must see, for each producer, that producer's sequence numbers strictly
increasing (and all ids strictly increasing) -- a claim that holds however the 4 consumers of a
reader interleave.
"""

from __future__ import annotations

import struct
import threading
import time

from journaled import Empty, JournaledQueue, QueueClosed, QueueConfig, ReaderConfig

PRODUCERS = 4
READERS = ("a", "b")
CONSUMERS = 4
ITEMS = 200_000
REC = struct.Struct("<II")  # producer, sequence number


def test_many_producers_and_consumers_deliver_every_item_exactly_once_in_order(qdir):
    per_producer = ITEMS // PRODUCERS
    q = JournaledQueue(qdir, QueueConfig(journal_size=1 << 20), name="q")
    # b reads behind from disk part of the time (small memory bound), a stays in memory
    readers = {"a": q.reader("a"), "b": q.reader("b", ReaderConfig(max_memory=512))}
    seen: dict[tuple[str, int], list[tuple[int, int, int]]] = {
        (r, c): [] for r in READERS for c in range(CONSUMERS)
    }
    failures: list[BaseException] = []

    def produce(p: int) -> None:
        try:
            for s in range(per_producer):
                q.put(REC.pack(p, s))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)

    def consume(rname: str, c: int) -> None:
        reader = readers[rname]
        out = seen[(rname, c)]
        try:
            while True:
                try:
                    item = reader.get(timeout=1.0)
                except Empty:
                    continue
                p, s = REC.unpack(item.data)
                out.append((item.id, p, s))
                reader.commit(item)
        except QueueClosed:
            return
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    consumers = [
        threading.Thread(target=consume, args=(r, c), daemon=True) for r in READERS for c in range(CONSUMERS)
    ]
    producers = [threading.Thread(target=produce, args=(p,), daemon=True) for p in range(PRODUCERS)]
    try:
        for t in consumers + producers:
            t.start()
        for t in producers:
            t.join(300)
            assert not t.is_alive(), "producer stuck"
        deadline = time.monotonic() + 300
        while any(readers[r].stats().committed < ITEMS for r in READERS) and not failures:
            assert time.monotonic() < deadline, "consumers stuck"
            time.sleep(0.05)
    finally:
        q.close()  # wakes every consumer with QueueClosed
        for t in consumers:
            t.join(60)
    assert not failures, failures[0]
    assert not any(t.is_alive() for t in consumers)

    for rname in READERS:
        streams = [seen[(rname, c)] for c in range(CONSUMERS)]
        ids = sorted(i for st in streams for i, _, _ in st)
        assert ids == list(range(1, ITEMS + 1)), f"reader {rname}: not exactly once"
        got = {(p, s) for st in streams for _, p, s in st}
        assert len(got) == ITEMS
        for st in streams:
            assert all(x[0] < y[0] for x, y in zip(st, st[1:])), "ids out of hand-out order"
            last = [-1] * PRODUCERS
            for _, p, s in st:
                assert s > last[p], f"reader {rname}: producer {p} out of order"
                last[p] = s
