"""The executors' part of a Spark batch read of a compressed queue against a plain one, without the JVM.

Puts ``--items`` JSON log lines (scripts/bench_compression.py) into a plain and a zstd queue, then,
``--rounds`` times for each: plans the read (``_partitions``, minPartitions 2) and reads every
partition with ``read_partition`` (Arrow batches of ``id``, ``value``) in a pool of two processes,
partitions handed out in order as Spark's ``local[2]`` does.  Prints the partitions, the planning
time and the read's wall time.  Separates planning and partitioning from Spark's own costs, which
vary by tens of percent from one read to the next on a loaded machine.

    python scripts/bench_compression_partitions.py --items 1000000

``--read-back`` then drains a copy of each queue ``--rounds`` times with a reader (get_many(1000) +
commit, as bench_compression.py's read-back) and prints its rate by the wall clock and by the
process's CPU time: on a machine shared with other work the CPU figure is the steadier A/B.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

from pyspark.sql.types import BinaryType, LongType, StructField, StructType

from journaled import JournaledQueue
from journaled.errors import Empty
from journaled.spark.offsets import Planner
from journaled.spark.source import JournaledPartition, _partitions, read_partition

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compression import lines, put_all  # noqa: E402

SCHEMA = StructType([StructField("id", LongType(), False), StructField("value", BinaryType(), False)])


def rows(part: JournaledPartition) -> int:
    return sum(batch.num_rows for batch in read_partition(part, SCHEMA))


def drain(path: str, n: int) -> tuple[float, float]:
    """Items per second a reader drains ``path`` (get_many(1000) + commit), by the wall clock and
    by this process's CPU time (the queue's opening not counted)."""
    with JournaledQueue(path, name="q") as q:
        r = q.reader("r")
        wall, cpu, got = time.perf_counter(), time.process_time(), 0
        while True:
            try:
                items = r.get_many(1000, timeout=0)
            except Empty:
                break
            for item in items:
                r.commit(item)
            got += len(items)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert got == n, (got, n)
    return n / wall, n / cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--read-back", action="store_true", help="also drain a copy of each queue with a reader")
    args = ap.parse_args()
    items = lines(args.items)
    base = tempfile.mkdtemp(prefix="bench_compression_partitions_")
    try:
        paths = {name: os.path.join(base, name) for name in ("plain", "zstd")}
        for name, path in paths.items():
            put_all(path, items, 1000, None if name == "plain" else name, "never")
        with ProcessPoolExecutor(2) as pool:
            list(pool.map(abs, range(2)))  # workers started before timing
            for _ in range(args.rounds):
                for name, path in paths.items():
                    t = time.perf_counter()
                    planner = Planner({"q": path}, min_partitions=2)
                    parts = _partitions(planner, planner.earliest(), planner.latest())
                    plan_s = time.perf_counter() - t
                    n = sum(pool.map(rows, parts))
                    read_s = time.perf_counter() - t
                    print(
                        f"{name:5}: {len(parts)} partitions, plan {plan_s:.3f} s, {n} rows in {read_s:.3f} s "
                        f"{n / read_s / 1e6:.2f} M rows/s"
                    )
        for _ in range(args.rounds if args.read_back else 0):
            rates = {}
            for name, path in paths.items():
                copy = path + ".copy"
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(path, copy)
                rates[name] = drain(copy, len(items))
            (pw, pc), (zw, zc) = rates["plain"], rates["zstd"]
            print(
                f"read-back: plain {pw:,.0f}/s ({pc:,.0f}/s of CPU), zstd {zw:,.0f}/s ({zc:,.0f}/s of CPU): "
                f"{zw / pw:.2f}x ({zc / pc:.2f}x of CPU)"
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
