"""Compressed journals against plain ones, in one run: bytes on disk, put_many rate, read-back rate.

Generates realistic JSON log lines (~200 bytes: repeated field names; timestamps, levels, hosts,
request ids, latencies and messages from a vocabulary), puts them with ``put_many`` in batches into a
queue with ``QueueConfig(compression="zstd")`` and into one without, then (``--spark``) reads each
with a Spark batch query, then drains each with a reader (get_many + commit).  Prints the figures,
their ratios and the machine load (``uptime``).

    python scripts/bench_compression.py --items 1000000 --spark --repeat 2
    python scripts/bench_compression.py --items 1000000 --producers 2 --no-read   (put_many only)

put_many is measured under both sync policies (the default, a flusher every 50 ms, timed until
``q.sync()`` returns; and ``sync="never"``, CPU only).  Every ratio is of one run, same load.
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from journaled import JournaledQueue, QueueConfig
from journaled.errors import Empty

WORDS = (
    "request served cache miss upstream timeout retry scheduled user login failed session expired "
    "payment accepted order shipped inventory low disk usage high connection reset checksum ok"
).split()


def lines(n: int, seed: int = 1) -> list[bytes]:
    rnd = random.Random(seed)
    t0 = 1_764_000_000_000
    out = []
    for i in range(n):
        ms = t0 + i * 3 + rnd.randrange(3)
        msg = " ".join(rnd.choice(WORDS) for _ in range(rnd.randrange(3, 8)))
        out.append(
            (
                '{"ts":"%s.%03dZ","level":"%s","host":"web-%02d","service":"%s","request_id":"%016x",'
                '"latency_ms":%d,"status":%d,"msg":"%s"}'
                % (
                    time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)),
                    ms % 1000,
                    rnd.choice(("info", "info", "info", "warn", "error", "debug")),
                    rnd.randrange(40),
                    rnd.choice(("api", "auth", "billing", "search")),
                    rnd.getrandbits(64),
                    int(rnd.expovariate(1 / 40)),
                    rnd.choice((200, 200, 200, 201, 204, 404, 500)),
                    msg,
                )
            ).encode()
        )
    return out


def put_all(
    path: str, items: list[bytes], batch: int, compression: str | None, sync: str, producers: int = 1
) -> dict[str, float]:
    """Put ``items`` in batches; the rate counts until every item is on stable storage
    (``q.sync()`` at the end) under the default sync policy (``QueueConfig().sync``, a flusher
    every 50 ms: what users get), or until handed to the OS with ``sync="never"`` (CPU only).
    With ``producers`` > 1, that many threads each put their share of the items (ids then
    interleave by batch).  ``cpu_per_item`` is the process's CPU time (every thread: the
    flusher's too) per item, which the load of other processes disturbs less than the rate."""
    cfg = (
        QueueConfig(compression=compression)
        if sync == "default"
        else QueueConfig(compression=compression, sync=sync)
    )
    with JournaledQueue(path, cfg, name="q") as q:
        q.reader("r")

        def put_share(share: list[bytes]) -> None:
            for k in range(0, len(share), batch):
                q.put_many(share[k : k + batch])

        step = -(-len(items) // producers)
        shares = [items[k : k + step] for k in range(0, len(items), step)]
        threads = [threading.Thread(target=put_share, args=(share,)) for share in shares[1:]]
        t, cpu = time.perf_counter(), time.process_time()
        for th in threads:
            th.start()
        put_share(shares[0])
        for th in threads:
            th.join()
        if sync != "never":
            q.sync()
        put_s = time.perf_counter() - t
        cpu_s = time.process_time() - cpu
    size = sum(os.path.getsize(f) for f in glob.glob(os.path.join(path, "q.[0-9]*")))
    return {"bytes": size, "put_per_s": len(items) / put_s, "cpu_per_item": cpu_s / len(items)}


def drain(path: str, n: int, batch: int) -> float:
    """Items per second a reader drains (get_many + commit), the queue opened anew."""
    with JournaledQueue(path, name="q") as q:
        r = q.reader("r")
        t = time.perf_counter()
        got = 0
        while True:
            try:
                items = r.get_many(batch, timeout=0)
            except Empty:
                break
            for item in items:
                r.commit(item)
            got += len(items)
        read_s = time.perf_counter() - t
    assert got == n, (got, n)
    return n / read_s


def spark_reads(paths: dict[str, str], n: int, repeat: int) -> dict[str, list[float]]:
    """Rows per second of each Spark batch read (``count``, ``sum(length(value))``) of each
    queue, after a warm-up, the queues read in turn (so all see the same load)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers import journaled too
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from journaled.spark import JournaledDataSource

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(JournaledDataSource)
    rates: dict[str, list[float]] = {name: [] for name in paths}
    try:
        for round_ in range(repeat + 1):
            for name, path in sorted(paths.items(), reverse=round_ % 2 == 1):
                t = time.perf_counter()
                rows = (
                    spark.read.format("journaled").load(path).agg(F.count("value"), F.sum(F.length("value")))
                )
                assert rows.collect()[0][0] == n
                if round_:
                    rates[name].append(n / (time.perf_counter() - t))
    finally:
        spark.stop()
    return rates


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=1_000_000, help="JSON log lines (default 1,000,000)")
    ap.add_argument("--batch", type=int, default=1000, help="items per put_many and get_many (default 1000)")
    ap.add_argument(
        "--producers", type=int, default=1, help="threads putting at once, each its share (default 1)"
    )
    ap.add_argument("--spark", action="store_true", help="also a Spark batch read of each queue (pyspark)")
    ap.add_argument("--no-read", action="store_true", help="put_many and bytes only: no read-back")
    ap.add_argument("--repeat", type=int, default=3, help="Spark reads per queue, each reported (default 3)")
    args = ap.parse_args()
    items = lines(args.items)
    print(f"{len(items)} lines, {sum(map(len, items)) / len(items):.0f} B each on average")
    print("load at start:", load())
    base = tempfile.mkdtemp(prefix="bench_compression_")
    paths = {"plain": os.path.join(base, "plain"), "zstd": os.path.join(base, "zstd")}
    try:
        for sync in ("never", "default"):
            figs = {}
            for name, path in paths.items():
                shutil.rmtree(path, ignore_errors=True)
                comp = None if name == "plain" else name
                figs[name] = put_all(path, items, args.batch, comp, sync, args.producers)
            plain, zstd = figs["plain"], figs["zstd"]
            pr, zr = plain["put_per_s"], zstd["put_per_s"]
            pc, zc = plain["cpu_per_item"] * 1e9, zstd["cpu_per_item"] * 1e9
            print(
                f"put_many, sync={sync}, {args.producers} producer(s): plain {pr:,.0f}/s, zstd {zr:,.0f}/s: "
                f"{zr / pr:.2f}x (goal >= 0.8); CPU per item: plain {pc:.0f} ns, zstd {zc:.0f} ns: "
                f"{pc / zc:.2f}x   [{load()}]"
            )
        print(
            f"bytes: plain {plain['bytes']:,}, zstd {zstd['bytes']:,}: "
            f"{zstd['bytes'] / plain['bytes']:.3f} (goal <= 0.25)"
        )
        if args.spark:
            rates = spark_reads(paths, len(items), args.repeat)
            for k, (p, z) in enumerate(zip(rates["plain"], rates["zstd"], strict=True)):
                print(
                    f"spark read {k + 1}: plain {p:,.0f} rows/s, zstd {z:,.0f} rows/s: "
                    f"{z / p:.2f}x (goal >= 0.9)"
                )
            print(f"   [{load()}]")
        for rep in range(0 if args.no_read else 2):
            read = {name: drain(path, len(items), args.batch) for name, path in paths.items()}
            print(
                f"read-back {rep + 1} (get_many + commit): plain {read['plain']:,.0f}/s, "
                f"zstd {read['zstd']:,.0f}/s: "
                f"{read['zstd'] / read['plain']:.2f}x (goal >= 0.8)   [{load()}]"
            )
            if rep == 0:  # drained: put again for a second read
                for name, path in paths.items():
                    shutil.rmtree(path, ignore_errors=True)
                    put_all(path, items, args.batch, None if name == "plain" else name, "never")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
