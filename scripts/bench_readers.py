#!/usr/bin/env python3
"""Benchmarks of the reader layer (issue 3): throughput and reopen time.

1. put+get+commit throughput with 1 KiB items: one producer thread puts items one at a time;
   each reader has one consumer thread doing get+commit.  Items/s = items put / wall time until
   every reader has committed every item.  Run with one reader and with three.
2. Reopen of a queue holding --gb of journal (1 KiB items) with checkpointed readers: time of
   ``JournaledQueue(path)`` and of the first ``get`` of a reader whose checkpoint points into the
   middle of the journal (with its position hint, and with the hint stripped so the reader must
   locate its head by scanning), and of a reader at the earliest item.  Timed warm (files in the
   page cache) and cold (the journal files evicted with posix_fadvise(DONTNEED), which touches
   only these files, not the rest of the machine's cache).

Prints one line per figure and, with --json, a JSON object at the end.  Not a test: nothing is
asserted.  Example::

    python scripts/bench_readers.py --items 100000 --gb 1.0
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time

from journaled import JournaledQueue, QueueConfig, ReaderConfig
from journaled.format.smallfiles import decode_checkpoint, encode_checkpoint

ITEM = 1024


def throughput(path: str, items: int, readers: int, sync: str | float) -> float:
    """items/s of put+get+commit with ``readers`` readers, one consumer thread each."""
    q = JournaledQueue(path, QueueConfig(sync=sync), name="bench")
    rs = [q.reader(f"r{k}") for k in range(readers)]
    payload = os.urandom(ITEM)
    done = [0] * readers

    def consume(k: int) -> None:
        r = rs[k]
        while done[k] < items:
            item = r.get(timeout=60)
            r.commit(item)
            done[k] += 1

    threads = [threading.Thread(target=consume, args=(k,)) for k in range(readers)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for _ in range(items):
        q.put(payload)
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    q.close()
    shutil.rmtree(path)
    return items / elapsed


def evict(path: str) -> None:
    for entry in os.listdir(path):
        fd = os.open(os.path.join(path, entry), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def build_big(path: str, gb: float) -> tuple[int, int]:
    """Write ``gb`` GiB of 1 KiB items; return (item count, id in the middle)."""
    n = int(gb * (1 << 30)) // ITEM
    batch = [os.urandom(ITEM)] * 1000
    with JournaledQueue(path, QueueConfig(sync=1.0), name="big") as q:
        q.reader("earliest")
        left = n
        while left:
            k = min(left, len(batch))
            q.put_many(batch[:k])
            left -= k
    mid = n // 2 + 17  # not on a file boundary
    with JournaledQueue(path, QueueConfig(), name="big") as q:
        r = q.reader("middle", ReaderConfig(start=mid))
        r.abort(r.get(timeout=60))  # as a reader that has been reading: its head is indexed
    # the close left a checkpoint with a position hint; "nohint" is the same without the hint
    with open(os.path.join(path, "big.read.middle"), "rb") as f:
        data = decode_checkpoint(f.read())
    assert data.head == mid and data.file_ms
    with open(os.path.join(path, "big.read.nohint"), "wb") as f:
        f.write(encode_checkpoint(type(data)(data.head, 0, 0, data.done, data.errors)))
    return n, mid


def save_checkpoints(path: str) -> dict[str, bytes]:
    out = {}
    for entry in os.listdir(path):
        if entry.startswith("big.read") or entry == "big.readers":
            with open(os.path.join(path, entry), "rb") as f:
                out[entry] = f.read()
    return out


def restore_checkpoints(path: str, saved: dict[str, bytes]) -> None:
    """Every measurement starts from the same checkpoints (a close rewrites them all)."""
    for entry, raw in saved.items():
        with open(os.path.join(path, entry), "wb") as f:
            f.write(raw)


def time_reopen(path: str, reader: str, expect: int, saved: dict[str, bytes]) -> tuple[float, float]:
    restore_checkpoints(path, saved)
    t0 = time.perf_counter()
    q = JournaledQueue(path, QueueConfig(), name="big")
    t1 = time.perf_counter()
    item = q.reader(reader).get(timeout=60)
    t2 = time.perf_counter()
    assert item.id == expect, (item.id, expect)
    q.reader(reader).abort(item)
    q.close()
    return t1 - t0, t2 - t1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--items", type=int, default=100_000, help="items for the throughput runs (default 100000)"
    )
    ap.add_argument(
        "--sync",
        default="0.05",
        help="sync policy for the throughput runs: always, never or seconds (default 0.05)",
    )
    ap.add_argument(
        "--gb", type=float, default=1.0, help="GiB of journal for the reopen run (default 1.0; 0 skips it)"
    )
    ap.add_argument(
        "--dir", default=None, help="parent directory for the queues (default: the system temp dir)"
    )
    ap.add_argument("--json", action="store_true", help="also print the figures as one JSON object")
    args = ap.parse_args()
    sync: str | float = args.sync if args.sync in ("always", "never") else float(args.sync)
    root = tempfile.mkdtemp(prefix="bench-readers-", dir=args.dir)
    out: dict[str, float] = {}
    try:
        for readers in (1, 3):
            rate = throughput(os.path.join(root, f"t{readers}"), args.items, readers, sync)
            out[f"put_get_commit_items_per_s_{readers}_reader"] = rate
            print(
                f"put+get+commit, 1 KiB, sync={args.sync}, {readers} reader(s): {rate:,.0f} items/s"
                f" ({args.items} items)",
                flush=True,
            )
        if args.gb > 0:
            big = os.path.join(root, "big")
            t0 = time.perf_counter()
            n, mid = build_big(big, args.gb)
            saved = save_checkpoints(big)
            size = sum(os.path.getsize(os.path.join(big, e)) for e in os.listdir(big))
            print(
                f"built {size / 2**30:.2f} GiB journal, {n} items, "
                f"{sum(e.startswith('big.') and e[4:].isdigit() for e in os.listdir(big))} files "
                f"in {time.perf_counter() - t0:.1f} s",
                flush=True,
            )
            for cache in ("warm", "cold"):
                for reader, expect in (("middle", mid), ("nohint", mid), ("earliest", 1)):
                    if cache == "cold":
                        evict(big)
                    else:
                        time_reopen(big, reader, expect, saved)  # warm the cache
                    opened, first = time_reopen(big, reader, expect, saved)
                    out[f"reopen_s_{cache}_{reader}"] = opened
                    out[f"first_get_s_{cache}_{reader}"] = first
                    print(
                        f"reopen ({cache} cache): open {opened * 1000:.1f} ms, first get of reader "
                        f"'{reader}' (head {expect}) {first * 1000:.1f} ms",
                        flush=True,
                    )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
