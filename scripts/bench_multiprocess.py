#!/usr/bin/env python3
"""Many processes, one queue: what a client process pays, side by side in one run.

Measures, with 1 KiB items and the default sync policy (0.05 s):

* a client's ``put_many`` of 1,000 items (items/s, median of ``--rounds`` batches);
* a client's single ``put`` round trip (p50 and p99 in µs);
* 2 consumer processes against 1 on one reader, each item costing ~200 µs of hashing (ratio of
  throughputs: the point of leaving the GIL behind);
* the owner's own in-process ``put`` throughput with no client connected, this checkout against
  another one (``--baseline``, e.g. the main branch), alternated in fresh processes (ratio).

Run from a checkout: ``PYTHONPATH=$PWD python scripts/bench_multiprocess.py [--baseline DIR]``.
Figures are recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

ITEM = b"x" * 1024

OWNER = """
import sys
from journaled import JournaledQueue
q = JournaledQueue(sys.argv[1])
for name in sys.argv[2:]:
    q.reader(name)
print("ready", flush=True)
sys.stdin.readline()
q.close()
"""

CONSUMER = """
import hashlib, sys, time
from journaled import JournaledQueue, Empty
q = JournaledQueue(sys.argv[1])
r = q.reader("work")
work, batch = int(sys.argv[2]), int(sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()
n = 0
while True:
    try:
        items = r.get_many(batch, timeout=0.5) if batch > 1 else [r.get(timeout=0.5)]
    except Empty:
        break
    for item in items:
        h = item.data
        for _ in range(work):
            h = hashlib.sha256(h).digest()
        if batch == 1:
            r.commit(item)
        n += 1
    if batch > 1:
        r.commit_many(items)
print(n, flush=True)
q.close()
"""

INPROC = """
import sys, tempfile, time
from journaled import JournaledQueue
item = b"x" * 1024
with tempfile.TemporaryDirectory() as d:
    with JournaledQueue(d + "/q") as q:
        q.reader("r")
        best = 0.0
        for _ in range(int(sys.argv[1])):
            t = time.perf_counter()
            for _ in range(20000):
                q.put(item)
            best = max(best, 20000 / (time.perf_counter() - t))
print(best)
"""


def child(code: str, *args: str, pythonpath: str | None = None) -> subprocess.Popen[str]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def work_for(seconds: float) -> int:
    """How many chained sha256 rounds of a 32-byte digest take ``seconds`` here."""
    n, h = 20000, ITEM
    t = time.perf_counter()
    for _ in range(n):
        h = hashlib.sha256(h).digest()
    return max(1, int(n * seconds / (time.perf_counter() - t)))


def consumers(d: str, procs: int, items: int, work: int, batch: int = 1) -> float:
    from journaled import JournaledQueue

    q = JournaledQueue(d)
    q.put_many([ITEM] * items)
    kids = [child(CONSUMER, d, str(work), str(batch)) for _ in range(procs)]
    for k in kids:
        assert k.stdout is not None and k.stdout.readline().strip() == "ready"
    t = time.perf_counter()
    for k in kids:
        assert k.stdin is not None
        k.stdin.write("\n")
        k.stdin.flush()
    done = sum(int(k.communicate(timeout=600)[0].split()[-1]) for k in kids)
    elapsed = time.perf_counter() - t - 0.5  # the last get's timeout
    q.close()
    assert done == items, (done, items)
    return items / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=20, help="put_many batches to time (default 20)")
    parser.add_argument("--puts", type=int, default=3000, help="single puts to time (default 3000)")
    parser.add_argument("--items", type=int, default=3000, help="items for the consumer test (default 3000)")
    parser.add_argument(
        "--batch", type=int, default=16, help="get_many size for the second consumer run (default 16)"
    )
    parser.add_argument("--baseline", help="another checkout's root (e.g. /work/main) for the owner ratio")
    args = parser.parse_args()
    from journaled import JournaledQueue

    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "q")
        owner = child(OWNER, d, "r")
        assert owner.stdout is not None and owner.stdout.readline().strip() == "ready"
        q = JournaledQueue(d)
        assert not q.is_owner
        batch = [ITEM] * 1000
        rates = []
        for _ in range(args.rounds):
            t = time.perf_counter()
            q.put_many(batch)
            rates.append(1000 / (time.perf_counter() - t))
        lat = []
        for _ in range(args.puts):
            t = time.perf_counter()
            q.put(ITEM)
            lat.append(time.perf_counter() - t)
        lat.sort()
        q.close()
        assert owner.stdin is not None
        owner.stdin.write("\n")
        owner.stdin.flush()
        owner.wait(timeout=120)
        print(
            f"client put_many of 1,000 x 1 KiB: {statistics.median(rates):,.0f} items/s (median of "
            f"{args.rounds})"
        )
        print(
            f"client put round trip: p50 {lat[len(lat) // 2] * 1e6:.0f} µs, "
            f"p99 {lat[len(lat) * 99 // 100] * 1e6:.0f} µs"
        )

        work = work_for(200e-6)
        for batch in (1, args.batch):
            how = "get + commit each" if batch == 1 else f"get_many({batch}) + commit_many"
            one = consumers(os.path.join(tmp, f"c1-{batch}"), 1, args.items, work, batch)
            two = consumers(os.path.join(tmp, f"c2-{batch}"), 2, args.items, work, batch)
            print(
                f"consumers with ~200 µs of work per item ({how}): 1 process {one:,.0f}/s, "
                f"2 processes {two:,.0f}/s, ratio {two / one:.2f}"
            )

    if args.baseline:
        here = os.getcwd()
        mine, base = [], []
        for _ in range(3):
            for path, out in ((here, mine), (args.baseline, base)):
                k = child(INPROC, "3", pythonpath=path)
                out.append(float(k.communicate(timeout=600)[0]))
        print(
            f"owner in-process put, no client: this checkout {max(mine):,.0f}/s, "
            f"baseline {max(base):,.0f}/s, "
            f"ratio {max(mine) / max(base):.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
