"""Profile get+commit from read-behind: a reader whose backlog is on disk, not in memory.

    python scripts/profile_read_behind.py [--items 1000000] [--size 100] [--profile] [--top 14]

Puts ``--items`` items of ``--size`` bytes (``sync="never"``, on /dev/shm when it exists) with
one reader attached, so most of them are read back from the journal, then times one thread doing
``get`` + ``commit`` until the reader is empty; ``--profile`` runs the drain under cProfile and
prints the ``--top`` entries by own time.  docs/benchmarks.md quotes its output.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import tempfile
import time

from journaled import JournaledQueue, QueueConfig


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=14)
    args = parser.parse_args()
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=base) as d:
        q = JournaledQueue(os.path.join(d, "q"), QueueConfig(sync="never"))
        r = q.reader("r")
        payload = b"x" * args.size
        for i in range(0, args.items, 1000):
            q.put_many([payload] * min(1000, args.items - i))

        def drain() -> None:
            get, commit = r.get, r.commit
            for _ in range(args.items):
                commit(get(False))

        t = time.perf_counter()
        if args.profile:
            prof = cProfile.Profile()
            prof.runcall(drain)
            pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)
        else:
            drain()
        print(
            f"get+commit: {args.items / (time.perf_counter() - t):,.0f}/s"
            + (" (under cProfile)" if args.profile else "")
        )
        q.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
