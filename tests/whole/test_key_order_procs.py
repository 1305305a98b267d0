"""Key order across processes (issue 39 point 1): two client processes and two threads of the
owner consume one ``key_order`` reader while five keys interleave, with aborts.  Every consumer claims
an item's key with an atomic ``mkdir`` for as long as it holds the read (so two holders of one
key at once, in any two processes, is a failed ``mkdir``) and, while it holds the key, checks and
writes the key's last delivered id (so a key's items out of id order is seen).  Then: 0 order
violations, 0 concurrent items per key, every id committed exactly once.  Also with a small
``max_memory``, so that most items behind a busy key are spilled and read back from the journal.
"""

from __future__ import annotations

import os
import threading

import pytest

from journaled import JournaledQueue, QueueConfig, ReaderConfig
from support.child import Child

#: One consumer: holds each read's key (mkdir) while it works on it, checks the key's order.
CONSUMER = """
import os, random, time
from journaled import Empty

def consume(r, marks, seed, out):
    rng = random.Random(seed)
    concurrent = disorder = 0
    while True:
        try:
            item = r.get(timeout=3)
        except Empty:
            break
        key = item.key
        if key is not None:
            claim = os.path.join(marks, key.decode() + ".held")
            try:
                os.mkdir(claim)
            except FileExistsError:
                concurrent += 1
                claim = None
            last_file = os.path.join(marks, key.decode() + ".last")
            text = open(last_file).read() if os.path.exists(last_file) else ""
            last = int(text) if text else -1  # empty: written by a concurrent holder (a violation)
            if item.id < last:
                disorder += 1
            with open(last_file, "w") as f:
                f.write(str(item.id))
        time.sleep(rng.random() * 0.002)  # work on it: another consumer may take the next item
        if key is not None and claim is not None:
            os.rmdir(claim)  # before the read ends: the next holder may come at once
        if rng.random() < 0.1:
            r.abort(item)
        else:
            r.commit(item)
            out.append(item.id)
    return concurrent, disorder
"""

CHILD = (
    CONSUMER
    + """
import sys
from journaled import JournaledQueue
q = JournaledQueue(sys.argv[1])
assert not q.is_owner
r = q.reader("r")
print("ready", flush=True)
done = []
concurrent, disorder = consume(r, sys.argv[2], int(sys.argv[3]), done)
print("committed", " ".join(map(str, done)), flush=True)
print("violations", concurrent, disorder, flush=True)
q.close()
"""
)


@pytest.mark.parametrize("max_memory", [None, 1], ids=["default_memory", "spilling"])
def test_two_client_processes_and_owner_threads_keep_key_order(tmp_path, max_memory) -> None:
    path, marks = str(tmp_path / "q"), str(tmp_path / "marks")
    os.mkdir(marks)
    namespace: dict = {}
    exec(CONSUMER, namespace)  # the owner's threads run the very same consumer
    keys = [None if i % 7 == 0 else b"k%d" % (i % 5) for i in range(1200)]
    with JournaledQueue(path, QueueConfig(sync="never")) as q:
        mem = {} if max_memory is None else {"max_memory": max_memory}
        r = q.reader("r", ReaderConfig(key_order=True, **mem))
        put = q.put_many([b"%d" % i for i in range(600)], keys=keys[:600])
        children = [Child(CHILD, path, marks, str(seed)) for seed in (1, 2)]
        for c in children:
            c.wait_for_line("ready")
        results: list[tuple[int, int]] = []
        committed: list[list[int]] = [[], []]

        def run(n: int) -> None:
            results.append(namespace["consume"](r, marks, 10 + n, committed[n]))

        spilled: list[int] = [0]
        running = threading.Event()

        def sample() -> None:  # the most items spilled behind busy keys at once
            while not running.wait(0.0005):
                with r.core.lock:
                    spilled.append(0 if r.core.keys is None else r.core.keys.spilled)

        threads = [threading.Thread(target=run, args=(n,)) for n in range(2)]
        sampler = threading.Thread(target=sample)
        for t in [*threads, sampler]:
            t.start()
        put += q.put_many([b"%d" % i for i in range(600, 1200)], keys=keys[600:])  # while they consume
        for t in threads:
            t.join(120)
        running.set()
        sampler.join(10)
        spilled_most = max(spilled)
        for c in children:
            c.wait_for_line("violations")
            assert c.proc.wait(60) == 0
    all_ids = committed[0] + committed[1]
    for c in children:
        line = next(ln for ln in c.lines if ln.startswith("committed"))
        all_ids += [int(x) for x in line.split()[1:]]
        _, concurrent, disorder = next(ln for ln in c.lines if ln.startswith("violations")).split()
        results.append((int(concurrent), int(disorder)))
    assert sorted(all_ids) == put, "an item was lost or committed twice"
    assert [c for c, _ in results] == [0, 0, 0, 0], f"items of one key open at once: {results}"
    assert [d for _, d in results] == [0, 0, 0, 0], f"a key's items out of id order: {results}"
    if max_memory is not None:
        assert spilled_most > 0, "nothing was spilled: the case is not the one meant"
    per_consumer = [len(committed[0]), len(committed[1])]
    assert all(per_consumer), f"an owner thread got nothing: {per_consumer}"
