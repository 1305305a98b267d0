#!/usr/bin/env python3
"""What the owner's lease costs (disk/lease.py, issue 36): one renewal, and puts/s with and
without renewals.

* renewal: ``LeaseHolder.renew()`` (re-read the lease, replace it atomically: temp file, fsync,
  rename, directory fsync) timed ``--renewals`` times on the queue's file system;
* puts/s: single ``put`` of ``--item-size`` bytes under ``sync="never"`` for ``--seconds``,
  alternately with the lease thread renewing every ``lease.PERIOD`` (the default, 1 s), every
  10 ms (100x the default: makes any interference visible), and without renewals, best of
  ``--rounds``.

Examples::

    python scripts/bench_lease.py                       # in a temporary directory
    python scripts/bench_lease.py --dir /mnt/nfs/tmp    # on the file system that matters

Figures go to stdout; nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

from journaled import JournaledQueue, QueueConfig
from journaled.disk import lease


def renewal_cost(directory: str, n: int) -> list[float]:
    old = lease.PERIOD
    lease.PERIOD = 3600.0  # the queue's own lease thread must not renew (the same temp file) meanwhile
    try:
        return _renewals(directory, n)
    finally:
        lease.PERIOD = old


def _renewals(directory: str, n: int) -> list[float]:
    with JournaledQueue(os.path.join(directory, "renew"), QueueConfig(sync="never")) as q:
        holder = q._dirlock.lease  # noqa: SLF001 - a benchmark times the real holder
        assert holder is not None
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            holder.renew()
            out.append((time.perf_counter() - t0) * 1e6)
        return out


def puts_per_s(directory: str, period: float, seconds: float, size: int) -> float:
    old = lease.PERIOD
    lease.PERIOD = period  # read by the lease thread when it starts (at open)
    try:
        path = tempfile.mkdtemp(dir=directory)
        with JournaledQueue(path, QueueConfig(sync="never")) as q:
            payload = b"x" * size
            n, end = 0, time.perf_counter() + seconds
            start = time.perf_counter()
            while time.perf_counter() < end:
                for _ in range(1000):
                    q.put(payload)
                n += 1000
            rate = n / (time.perf_counter() - start)
        shutil.rmtree(path, ignore_errors=True)
        return rate
    finally:
        lease.PERIOD = old


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=None, help="where to create the queues (default: a temp dir)")
    ap.add_argument("--renewals", type=int, default=500)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--item-size", type=int, default=100)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="bench-lease-", dir=args.dir)
    try:
        us = sorted(renewal_cost(root, args.renewals))
        print(
            f"renewal: median {statistics.median(us):.0f} us, p99 {us[int(len(us) * 0.99) - 1]:.0f} us "
            f"({args.renewals} renewals in {root})"
        )
        # "without": a period longer than the run, so the thread never renews while puts run
        cases = {"renew every 1 s": lease.PERIOD, "renew every 10 ms": 0.01, "no renewal": 3600.0}
        best = {name: 0.0 for name in cases}
        for _ in range(args.rounds):
            for name, period in cases.items():
                best[name] = max(best[name], puts_per_s(root, period, args.seconds, args.item_size))
        for name, rate in best.items():
            print(f"puts/s, {name}: {rate:,.0f} (best of {args.rounds} x {args.seconds:g} s)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
