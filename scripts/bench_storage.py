#!/usr/bin/env python3
"""Storage-layer benchmark: puts/s per sync policy and thread count, next to raw write loops.

For each item size (default 100 B and 1 KiB) it measures, for a fixed wall-clock budget per case:

* ``JournaledQueue.put`` under ``sync="always"``, ``sync=0.05`` and ``sync="never"``, from 1 thread
  and from 8 threads (each case on a fresh queue directory; the clock stops after a final
  ``q.sync()`` for the periodic policy so its figure includes making everything durable);
* a raw loop of ``os.write(length + crc32c + payload)`` on one file (the floor of "no sync");
* the same raw loop with ``os.fdatasync`` after every write (the floor of "always", one thread);
* the group-commit fsync ratio: puts per fsync round under ``sync="always"``.

Everything runs in ``--dir`` (default: a temporary directory under the current directory, so the
figures are for the disk you run it on).  Numbers are noisy on a shared machine: run it twice.

    python scripts/bench_storage.py                 # table
    python scripts/bench_storage.py --json          # machine-readable
    python scripts/bench_storage.py --seconds 2 --repeat 3   # median of 3 runs per case
    python scripts/bench_storage.py --seconds 3 --sizes 100,1024,65536
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from crc32c import crc32c

from journaled import JournaledQueue, QueueConfig

POLICIES: list[Any] = ["always", 0.05, "never"]


def bench_queue(base: str, sync: Any, threads: int, size: int, seconds: float) -> dict[str, Any]:
    qdir = tempfile.mkdtemp(prefix="q-", dir=base)
    payload = os.urandom(size)
    counts = [0] * threads
    with JournaledQueue(qdir, config=QueueConfig(sync=sync), name="bench") as q:
        start = threading.Barrier(threads + 1)
        deadline = 0.0

        def work(t: int) -> None:
            start.wait()
            n = 0
            put = q.put
            while True:
                for _ in range(16):  # check the clock every 16 puts
                    put(payload)
                n += 16
                if time.perf_counter() >= deadline:
                    break
            counts[t] = n

        pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for th in pool:
            th.start()
        fsyncs0 = q.fsync_count
        deadline = time.perf_counter() + seconds
        t0 = time.perf_counter()
        start.wait()
        for th in pool:
            th.join()
        if sync != "never":
            q.sync()  # a periodic policy's figure includes making everything durable
        elapsed = time.perf_counter() - t0
        fsyncs = q.fsync_count - fsyncs0
    shutil.rmtree(qdir, ignore_errors=True)
    puts = sum(counts)
    return {
        "case": "journaled",
        "sync": sync,
        "threads": threads,
        "size": size,
        "puts": puts,
        "seconds": round(elapsed, 3),
        "puts_per_s": round(puts / elapsed),
        "fsyncs": fsyncs,
        "puts_per_fsync": round(puts / fsyncs, 2) if fsyncs else None,
    }


def bench_raw(base: str, size: int, seconds: float, fdatasync: bool) -> dict[str, Any]:
    path = os.path.join(base, f"raw-{size}-{int(fdatasync)}")
    payload = os.urandom(size)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o600)
    n = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    try:
        while time.perf_counter() < deadline:
            for _ in range(16):
                os.write(fd, struct.pack("<II", len(payload), crc32c(payload)) + payload)
                if fdatasync:
                    os.fdatasync(fd)
            n += 16
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    return {
        "case": "raw write+fdatasync" if fdatasync else "raw write",
        "sync": "fdatasync each" if fdatasync else "none",
        "threads": 1,
        "size": size,
        "puts": n,
        "seconds": round(elapsed, 3),
        "puts_per_s": round(n / elapsed),
        "fsyncs": n if fdatasync else 0,
        "puts_per_fsync": 1.0 if fdatasync else None,
    }


def median_of(repeat: int, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``measure`` ``repeat`` times and keep the run with the median puts/s."""
    runs = sorted((measure() for _ in range(repeat)), key=lambda r: r["puts_per_s"])
    print(".", end="", file=sys.stderr, flush=True)
    return runs[len(runs) // 2]


def run(
    base: str, sizes: list[int], threads: list[int], seconds: float, repeat: int = 1
) -> list[dict[str, Any]]:
    rows = []
    for size in sizes:
        for fdatasync in (False, True):
            rows.append(median_of(repeat, lambda: bench_raw(base, size, seconds, fdatasync)))
        for sync in POLICIES:
            for t in threads:
                rows.append(median_of(repeat, lambda: bench_queue(base, sync, t, size, seconds)))
    print(file=sys.stderr)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = f"{'case':<22}{'sync':>16}{'threads':>9}{'size':>7}{'puts/s':>11}{'fsyncs':>9}{'puts/fsync':>12}"
    lines = [head, "-" * len(head)]
    for r in rows:
        ratio = "-" if r["puts_per_fsync"] is None else f"{r['puts_per_fsync']:.1f}"
        lines.append(
            f"{r['case']:<22}{str(r['sync']):>16}{r['threads']:>9}{r['size']:>7}"
            f"{r['puts_per_s']:>11,}{r['fsyncs']:>9}{ratio:>12}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Measure journaled put throughput per sync policy next to raw write loops.",
        epilog="Figures depend on the disk under --dir and on machine load; run twice.",
    )
    parser.add_argument(
        "--dir", default=None, help="directory on the disk to measure (default: temp dir under .)"
    )
    parser.add_argument("--seconds", type=float, default=1.0, help="wall-clock budget per case (default 1.0)")
    parser.add_argument(
        "--sizes", default="100,1024", help="comma-separated item sizes in bytes (default 100,1024)"
    )
    parser.add_argument("--threads", default="1,8", help="comma-separated thread counts (default 1,8)")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs per case; the median is shown (default 1)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    base = tempfile.mkdtemp(prefix="bench-storage-", dir=args.dir or ".")
    try:
        rows = run(base, sizes, threads, args.seconds, max(1, args.repeat))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        meta = {"dir": os.path.abspath(args.dir or "."), "seconds": args.seconds, "repeat": args.repeat}
        print(json.dumps({**meta, "rows": rows}, indent=1))
    else:
        print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
