#!/usr/bin/env python3
"""Costs of the Python-ecosystem layer: journaled.Queue vs queue.Queue, and asyncio round trips.

Measures, each on a fresh temporary queue directory:

* ``queue.Queue`` put+get+task_done (the in-memory baseline);
* ``journaled.Queue`` put+get+task_done, small pickled dicts, one producer and one consumer
  thread, for the periodic sync policy (default 50 ms) and for ``sync="always"`` (every put
  durable on return; group commit across producer threads);
* asyncio: ``await q.aput`` + ``async with reader.atransaction()`` in one task, and the
  producer-thread -> ``await reader.aget()`` hand-off (a put waking a parked coroutine).

Examples::

    python scripts/bench_compat.py
    python scripts/bench_compat.py --items 50000 --producers 4

Figures go to stdout (items per second); nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import queue as stdlib_queue
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import journaled
from journaled import JournaledQueue, QueueConfig


def run_pair(q: Any, items: int, producers: int) -> float:
    """Producers put ``items`` dicts in total; one consumer gets and task_dones them all."""
    per = items // producers

    def produce() -> None:
        for i in range(per):
            q.put({"n": i, "payload": "x" * 64})

    def consume() -> None:
        for _ in range(per * producers):
            q.get()
            q.task_done()

    threads = [threading.Thread(target=produce) for _ in range(producers)]
    threads.append(threading.Thread(target=consume))
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return per * producers / (time.perf_counter() - t0)


def with_dir(fn: Callable[[str], float]) -> float:
    d = tempfile.mkdtemp(prefix="bench-compat-")
    try:
        return fn(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def bench_journaled(d: str, items: int, producers: int, sync: Any) -> float:
    with journaled.Queue(d, maxsize=10_000, config=QueueConfig(sync=sync)) as q:
        return run_pair(q, items, producers)


async def async_roundtrip(d: str, items: int) -> float:
    with JournaledQueue(d, QueueConfig(sync="never")) as q:
        r = q.reader("r")
        t0 = time.perf_counter()
        for i in range(items):
            await q.aput(b"%d" % i)
            async with r.atransaction(timeout=10):
                pass
        return items / (time.perf_counter() - t0)


async def async_handoff(d: str, items: int) -> float:
    with JournaledQueue(d, QueueConfig(sync="never")) as q:
        r = q.reader("r")
        t0 = time.perf_counter()
        producer = threading.Thread(target=lambda: [q.put(b"%d" % i) for i in range(items)])
        producer.start()
        for _ in range(items):
            r.commit(await r.aget(timeout=30))
        producer.join()
        return items / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=20_000, help="items per measurement (default 20000)")
    ap.add_argument("--producers", type=int, default=2, help="producer threads (default 2)")
    args = ap.parse_args(argv)
    n, p = args.items, args.producers
    rows = [
        ("queue.Queue (memory)", run_pair(stdlib_queue.Queue(maxsize=10_000), n, p)),
        ("journaled.Queue sync=0.05", with_dir(lambda d: bench_journaled(d, n, p, 0.05))),
        ("journaled.Queue sync=always", with_dir(lambda d: bench_journaled(d, max(n // 10, p), p, "always"))),
        ("asyncio aput+atransaction", with_dir(lambda d: asyncio.run(async_roundtrip(d, n)))),
        ("asyncio thread put -> aget", with_dir(lambda d: asyncio.run(async_handoff(d, n)))),
    ]
    print(f"items={n} producers={p}")
    for name, rate in rows:
        print(f"{name:32s} {rate:12,.0f} items/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
