"""Profile get+commit from read-behind: a reader whose backlog is on disk, not in memory.

    python scripts/profile_read_behind.py [--items 1000000] [--size 100] [--profile] [--top 14]
    python scripts/profile_read_behind.py --compare [--items 1000000] [--size 100] [--rounds 8]

Puts ``--items`` items of ``--size`` bytes (``sync="never"``, on /dev/shm when it exists) with
one reader attached, so most of them are read back from the journal.  The items that went to
memory at their put (``max_memory``'s worth) are taken first, untimed, so what is timed is
read-behind alone: one thread doing ``get`` + ``commit`` until the reader is empty; ``--profile``
runs that drain under cProfile and prints the ``--top`` entries by own time.  docs/benchmarks.md
quotes its output.

``--compare`` measures what read-behind costs over memory instead: it alternates ``--rounds``
times a timed drain of ``--batch`` items read back from the journal with one of ``--batch`` items
just put to a second queue whose reader keeps them in memory, and prints the best rate of each,
their ratio (issue 26's goal: >= 0.9) and what read-behind adds per item.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import tempfile
import time

from journaled import JournaledQueue, QueueConfig, Reader


def drain(reader: Reader, n: int) -> float:
    """Seconds taken by ``n`` get+commit pairs."""
    get, commit = reader.get, reader.commit
    t = time.perf_counter()
    for _ in range(n):
        commit(get(False))
    return time.perf_counter() - t


def compare(d: str, args: argparse.Namespace, behind: Reader) -> None:
    payload = b"x" * args.size
    with JournaledQueue(os.path.join(d, "m"), QueueConfig(sync="never")) as q:
        near = q.reader("r")
        rates: dict[str, list[float]] = {"read-behind": [], "memory": []}
        for _ in range(args.rounds):
            if behind.stats().items_on_disk < args.batch:
                break
            rates["read-behind"].append(args.batch / drain(behind, args.batch))
            for i in range(0, args.batch, 1000):
                q.put_many([payload] * min(1000, args.batch - i))
            if near.stats().items_on_disk:
                raise SystemExit(f"--batch {args.batch} does not fit max_memory: make it smaller")
            rates["memory"].append(args.batch / drain(near, args.batch))
    if not rates["memory"]:
        raise SystemExit("--items leaves no read-behind round: make it larger than --batch")
    rb, mem = max(rates["read-behind"]), max(rates["memory"])
    print(f"get+commit, best of {len(rates['memory'])} alternated rounds of {args.batch:,} items:")
    print(f"  read-behind {rb:12,.0f}/s")
    print(f"  memory      {mem:12,.0f}/s")
    extra_ns = (1 / rb - 1 / mem) * 1e9
    print(f"  ratio {rb / mem:.3f} (goal >= 0.9); read-behind adds {extra_ns:,.0f} ns per item")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=14)
    parser.add_argument("--compare", action="store_true", help="read-behind vs memory, alternated")
    parser.add_argument("--rounds", type=int, default=8, help="--compare: rounds per side")
    parser.add_argument("--batch", type=int, default=40_000, help="--compare: items per round")
    args = parser.parse_args()
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=base) as d:
        q = JournaledQueue(os.path.join(d, "q"), QueueConfig(sync="never"))
        r = q.reader("r")
        payload = b"x" * args.size
        for i in range(0, args.items, 1000):
            q.put_many([payload] * min(1000, args.items - i))
        in_memory = r.stats().items_in_memory
        drain(r, in_memory)
        n = args.items - in_memory
        if args.compare:
            compare(d, args, r)
        elif args.profile:
            prof = cProfile.Profile()
            t = time.perf_counter()
            prof.runcall(drain, r, n)
            elapsed = time.perf_counter() - t
            pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)
            print(f"get+commit: {n / elapsed:,.0f}/s (under cProfile; {n:,} items read back)")
        else:
            print(f"get+commit: {n / drain(r, n):,.0f}/s ({n:,} items read back)")
        q.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
