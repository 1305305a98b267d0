#!/usr/bin/env python3
"""Key order's cost (issue 39 point 1): 8 consumer threads of the owner and 4 client processes
deliver a backlog spread over 1,000 keys, once with ``ReaderConfig(key_order=True)`` and once
without, on the same items; prints items/s of each, the ratio (goal >= 0.8), and, from every
consumer's record of each read (its key, id, and when it was got and settled, on the system-wide
monotonic clock), the order violations and the overlapping reads of one key (goal 0 and 0).

    PYTHONPATH=$PWD python scripts/bench_key_order.py [--items 40000] [--keys 1000] [--work-us 0]
        [--hot 0] [--hot-hold 0] [--max-memory BYTES]

The rate is items settled per second from the moment the consumers start until the reader's
head passes the last item (the owner polls it); every item is put before they start.

The hot-key case (``--hot N``): the first N items all carry one key, "hot", and the rest follow
them in the journal, so with key order the hot key's backlog waits behind its first item while
everything else should flow past it (the rule "a busy key holds back only itself", under
``max_memory`` pressure: with a small ``--max-memory`` most of the hot backlog is spilled and read
back).  Then also printed: the rate of the other items (settled per second until the last of them
is), and the most that the reader charged to ``max_memory`` (sampled as the owner polls).
``--hot-hold S``: the hot key's first item is taken before the consumers start and held open S
seconds (one slow item), so its whole backlog waits behind it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

from journaled import JournaledQueue, QueueConfig, ReaderConfig

CONSUMER = """
import json, sys, time
from journaled import Empty, JournaledQueue

def consume(r, go, work, out, idle=0.5):
    go()
    while True:
        try:
            item = r.get(timeout=idle)
        except Empty:
            return
        got = time.monotonic()
        if work:
            end = got + work
            while time.monotonic() < end:
                pass
        done = time.monotonic()
        r.commit(item)
        out.append((item.key.decode() if item.key is not None else None, item.id, got, done))

if __name__ == "__main__":
    path, start_file, work, out_file = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    idle = float(sys.argv[5])
    q = JournaledQueue(path)
    r = q.reader("r")
    print("ready", flush=True)

    def go():
        while not __import__("os").path.exists(start_file):
            time.sleep(0.001)

    out = []
    consume(r, go, work, out, idle)
    with open(out_file, "w") as f:
        json.dump(out, f)
    q.close()
"""


def run(
    ordered: bool,
    items: int,
    keys: int,
    work_us: float,
    threads: int,
    procs: int,
    hot: int = 0,
    max_memory: int | None = None,
    hot_hold: float = 0.0,
) -> dict:
    root = tempfile.mkdtemp(prefix="bench-key-order-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    path, start_file = os.path.join(root, "q"), os.path.join(root, "go")
    rng = random.Random(7)
    key_list = [b"hot"] * hot + [b"k%d" % rng.randrange(keys) for _ in range(items - hot)]
    ns: dict = {}
    idle = 0.5 + hot_hold  # a consumer stops after this long without an item
    exec(CONSUMER.split('if __name__ == "__main__":')[0], ns)
    with JournaledQueue(path, QueueConfig(sync="never")) as q:
        cfg = ReaderConfig(key_order=ordered)
        if max_memory is not None:
            cfg = ReaderConfig(key_order=ordered, max_memory=max_memory)
        r = q.reader("r", cfg)
        for lo in range(0, items, 1000):
            q.put_many([b"x" * 100] * len(key_list[lo : lo + 1000]), keys=key_list[lo : lo + 1000])
        last = q.stats().next_id - 1
        children, outs = [], []
        for n in range(procs):
            out_file = os.path.join(root, f"out{n}.json")
            outs.append(out_file)
            child = subprocess.Popen(
                [sys.executable, "-c", CONSUMER, path, start_file, str(work_us / 1e6), out_file, str(idle)],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
            children.append(child)
        records: list[list] = [[] for _ in range(threads + 1)]
        slow = threading.Timer(hot_hold, lambda: None)
        if hot and hot_hold:  # one slow item: the hot key's first, open before the consumers start
            first = r.get(block=False)
            got_at = time.monotonic()

            def settle() -> None:
                r.commit(first)
                records[threads].append(("hot", first.id, got_at, time.monotonic()))

            slow = threading.Timer(hot_hold, settle)
        started = threading.Event()
        workers = [
            threading.Thread(target=ns["consume"], args=(r, started.wait, work_us / 1e6, records[n], idle))
            for n in range(threads)
        ]
        for t in workers:
            t.start()
        t0 = time.monotonic()
        slow.start()
        open(start_file, "w").close()
        started.set()
        charged_most = 0
        while r.head <= last:
            time.sleep(0.002)
            with r.core.lock:
                charged_most = max(charged_most, r.core.charged())
        elapsed = time.monotonic() - t0
        for t in workers:
            t.join()
        slow.join()
        for child in children:
            child.wait(120)
    reads = [rec for recs in records for rec in recs]
    per_consumer = [len(recs) for recs in records[:threads]]
    for out_file in outs:
        with open(out_file) as f:
            got = json.load(f)
        reads += got
        per_consumer.append(len(got))
    by_key: dict[str, list] = {}
    for key, item_id, got_at, done_at in reads:
        by_key.setdefault(key, []).append((got_at, done_at, item_id))
    others_done = max((done for key, _i, _g, done in reads if key != "hot"), default=t0) - t0
    disorder = overlap = 0
    for seq in by_key.values():
        seq.sort()
        for (g0, d0, i0), (g1, _d1, i1) in zip(seq, seq[1:]):
            disorder += i1 < i0
            overlap += g1 < d0  # got before the previous read of its key was settled
    assert len(reads) == items and len({i for _, i, _, _ in reads}) == items, "lost or repeated"
    return {
        "key_order": ordered,
        "items": items,
        "seconds": round(elapsed, 3),
        "items_per_s": round(items / elapsed),
        "order_violations": disorder,
        "concurrent_per_key": overlap,
        "per_consumer": per_consumer,
        **({"others_per_s": round((items - hot) / others_done), "charged_most": charged_most} if hot else {}),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=40_000)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--work-us", type=float, default=0.0, help="busy work per item, microseconds")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=1, help="alternate the two runs this many times")
    ap.add_argument("--hot", type=int, default=0, help="the first N items carry one key, 'hot'")
    ap.add_argument("--max-memory", type=int, default=None, help="the reader's max_memory, bytes")
    ap.add_argument("--hot-hold", type=float, default=0.0, help="hold the hot key's first item open S s")
    args = ap.parse_args()
    plain, ordered = [], []
    for _ in range(args.rounds):
        for flag, into in ((False, plain), (True, ordered)):
            res = run(
                flag,
                args.items,
                args.keys,
                args.work_us,
                args.threads,
                args.procs,
                hot=args.hot,
                max_memory=args.max_memory,
                hot_hold=args.hot_hold,
            )
            print(json.dumps(res))
            into.append(res)
    best_plain = max(r["items_per_s"] for r in plain)
    best_ordered = max(r["items_per_s"] for r in ordered)
    ratio = best_ordered / best_plain
    print(
        f"unordered {best_plain} items/s, key order {best_ordered} items/s: ratio {ratio:.2f} (goal >= 0.8)"
    )
    violations = sum(r["order_violations"] for r in ordered), sum(r["concurrent_per_key"] for r in ordered)
    print(
        f"key order: {violations[0]} order violations, {violations[1]} concurrent reads of a key (goal 0, 0)"
    )
    if args.hot:
        others = max(r["others_per_s"] for r in plain), max(r["others_per_s"] for r in ordered)
        print(f"items of other keys: unordered {others[0]} items/s, key order {others[1]} items/s")
    seen = sum(r["order_violations"] for r in plain), sum(r["concurrent_per_key"] for r in plain)
    print(f"unordered, for comparison: {seen[0]} order violations, {seen[1]} concurrent reads of a key")
    return 0


if __name__ == "__main__":
    sys.exit(main())
