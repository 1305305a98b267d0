#!/usr/bin/env python3
"""Benchmark the journaled Spark source against Spark's own text file source, in one run.

The same N records are written to a journaled queue and, as JSON lines, to text files.  Then,
on one local SparkSession:

* batch: ``spark.read.format("journaled")`` vs ``spark.read.text`` (sum of value lengths, so
  every byte is read and handed to the JVM);
* streaming: ``readStream`` with ``Trigger.AvailableNow`` into the ``noop`` sink, both sources;
* latency: a processing-time trigger over a queue a producer thread keeps writing to; the
  end-to-end latency is (time a micro-batch reaches ``foreachBatch``) - (item's add time).

``--startup`` instead measures what journaled costs each Python worker Spark starts: in a fresh
interpreter that has imported the worker's own module, the time to import ``journaled.spark``
and build the reader or writer that worker builds, in CPU seconds of that process (wall time on
a shared machine is mostly waiting); best of ``--repeat`` runs, each side in turn.

``--tests`` instead runs ``pytest tests/spark/test_spark.py`` and reports its wall time and the peak
memory of the whole process tree (pytest + JVM + Python workers), sampled every 0.2 s.

Examples::

    python scripts/bench_spark.py --rows 200000
    python scripts/bench_spark.py --startup --repeat 9
    python scripts/bench_spark.py --tests
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def tree_rss(pid: int, cpu: dict[int, float] | None = None) -> int:
    """Resident bytes of ``pid`` and all its descendants; ``cpu`` collects each one's CPU
    seconds (user + system) as last seen."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ppid, pages = int(fields[1]), int(fields[21])
            ticks[int(entry)] = int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
        rss[int(entry)] = pages * os.sysconf("SC_PAGE_SIZE")
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        if cpu is not None and p in ticks:
            cpu[p] = ticks[p] / os.sysconf("SC_CLK_TCK")
        todo.extend(children.get(p, []))
    return total


def run_tests() -> None:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/spark/test_spark.py"],
        cwd=here,
    )
    peak = 0
    cpu: dict[int, float] = {}
    while proc.poll() is None:
        peak = max(peak, tree_rss(proc.pid, cpu))
        time.sleep(0.2)
    print(
        f"tests/spark/test_spark.py: exit {proc.returncode}, wall {time.monotonic() - t0:.1f} s, "
        f"CPU {sum(cpu.values()):.0f} s (user+sys of the tree, sampled; a busy machine inflates "
        f"wall time, not this), peak memory of the process tree {peak / 2**20:.0f} MiB"
    )


STARTUP_PROBE = """
import importlib, sys, time
importlib.import_module(sys.argv[1])
from pyspark.sql.types import StructType
t = time.process_time()
if sys.argv[4] == "bare":  # as if journaled/__init__.py imported nothing until asked
    import importlib.util, types
    bare = types.ModuleType("journaled")
    bare.__path__ = importlib.util.find_spec("journaled").submodule_search_locations
    sys.modules["journaled"] = bare
import journaled.spark
options = {"path": sys.argv[3], "startingOffsets": "earliest", "sinkId": "bench"}
src = journaled.spark.JournaledDataSource(options=options)
schema = StructType().add("value", "binary")
getattr(src, sys.argv[2])(schema, False) if "riter" in sys.argv[2] else getattr(src, sys.argv[2])(schema)
print(time.process_time() - t, len([m for m in sys.modules if m.split(".")[0] == "journaled"]))
"""

#: (worker, the module Spark runs in it, what it builds from the data source)
STARTUP_WORKERS = [
    ("batch planner", "pyspark.sql.worker.plan_data_source_read", "reader"),
    ("stream reader", "pyspark.sql.streaming.python_streaming_source_runner", "streamReader"),
    ("batch writer", "pyspark.sql.worker.write_into_data_source", "writer"),
    ("stream writer", "pyspark.sql.worker.python_streaming_sink_runner", "streamWriter"),
]


def run_startup(repeat: int, others: list[str]) -> None:
    """Best time per worker kind, for this checkout and for each of ``others`` (directories
    holding another version of the ``journaled`` package), interleaved run by run."""
    import journaled

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sides = [("this checkout", here, "full"), ("with a lazy journaled/__init__", here, "bare")]
    sides += [(o, o, "full") for o in others]
    with tempfile.TemporaryDirectory() as tmp:
        qdir = os.path.join(tmp, "q")
        with journaled.JournaledQueue(qdir) as q:
            q.put(b"x")
        for label, module, method in STARTUP_WORKERS:
            best: dict[str, tuple[float, int]] = {}
            for _ in range(repeat):
                for side, path, init in sides:
                    out = subprocess.run(
                        [sys.executable, "-c", STARTUP_PROBE, module, method, qdir, init],
                        capture_output=True,
                        text=True,
                        check=True,
                        env={**os.environ, "PYTHONPATH": path},
                        cwd=tmp,
                    ).stdout.split()
                    secs, mods = float(out[0]), int(out[1])
                    best[side] = min(best.get(side, (secs, mods)), (secs, mods))
            print(
                f"{label:14} ({method}): "
                + ", ".join(
                    f"{side}: {b[0] * 1000:.0f} ms, {b[1]} journaled modules" for side, b in best.items()
                )
            )


def make_data(base: str, rows: int, size: int) -> tuple[str, str]:
    import journaled

    qdir, tdir = os.path.join(base, "queue"), os.path.join(base, "text")
    os.makedirs(tdir)
    pad = "x" * max(0, size - 40)
    payloads = [json.dumps({"n": i, "pad": pad}).encode() for i in range(rows)]
    with journaled.JournaledQueue(qdir, journaled.QueueConfig(sync="never")) as q:
        for k in range(0, rows, 10_000):
            q.put_many(payloads[k : k + 10_000])
    with open(os.path.join(tdir, "part-0.json"), "wb") as f:
        f.write(b"\n".join(payloads) + b"\n")
    return qdir, tdir


def timed(fn, repeat: int) -> float:
    """Best wall time of ``repeat`` runs after one warm-up run."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000, help="records in the data set (default 200000)")
    ap.add_argument("--size", type=int, default=100, help="bytes per record (default 100)")
    ap.add_argument("--master", default="local[1]", help="Spark master (default local[1])")
    ap.add_argument("--repeat", type=int, default=2, help="timed runs per measurement (best is kept)")
    ap.add_argument("--latency-seconds", type=float, default=15.0, help="how long to measure latency")
    ap.add_argument("--trigger-ms", type=int, default=200, help="processing-time trigger interval")
    ap.add_argument("--tests", action="store_true", help="measure the Spark test session instead")
    ap.add_argument("--startup", action="store_true", help="measure the Python workers' start-up instead")
    ap.add_argument(
        "--compare", action="append", default=[], help="with --startup: a directory holding another journaled"
    )
    args = ap.parse_args()
    if args.tests:
        run_tests()
        return
    if args.startup:
        run_startup(args.repeat, args.compare)
        return

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import journaled
    from journaled.spark import JournaledDataSource

    base = tempfile.mkdtemp(prefix="bench_spark_")
    try:
        qdir, tdir = make_data(base, args.rows, args.size)
        spark = (
            SparkSession.builder.master(args.master)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "1")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(JournaledDataSource)
        print(f"{args.rows} records of {args.size} bytes, master {args.master}, pyspark {spark.version}")

        def batch_ours() -> None:
            spark.read.format("journaled").load(qdir).agg(F.sum(F.length("value"))).collect()

        def batch_text() -> None:
            spark.read.text(tdir).agg(F.sum(F.length("value"))).collect()

        counter = iter(range(10**9))
        in_batches: dict[str, float] = {}

        def stream(reader) -> None:
            cp = os.path.join(base, f"cp{next(counter)}")
            q = (
                reader()
                .writeStream.format("noop")
                .option("checkpointLocation", cp)
                .trigger(availableNow=True)
                .start()
            )
            q.awaitTermination()
            # time inside micro-batches, without starting the query (a fixed cost per start)
            busy = sum(
                p["durationMs"].get("triggerExecution", 0) for p in q.recentProgress if p["numInputRows"]
            )
            in_batches[q.name or "last"] = busy / 1000

        def stream_ours() -> None:
            stream(
                lambda: spark.readStream.format("journaled").option("startingOffsets", "earliest").load(qdir)
            )

        def stream_text() -> None:
            stream(lambda: spark.readStream.text(tdir))

        for label, fn in [
            ("batch     journaled", batch_ours),
            ("batch     text file", batch_text),
            ("streaming journaled", stream_ours),
            ("streaming text file", stream_text),
        ]:
            in_batches.clear()
            secs = timed(fn, args.repeat)
            extra = ""
            if in_batches:
                busy = in_batches["last"]
                extra = f"; inside micro-batches {args.rows / busy:,.0f} rows/s ({busy:.2f} s)"
            print(f"{label}: {args.rows / secs:12,.0f} rows/s  ({secs:.2f} s wall{extra})")

        # ---- end-to-end latency with a processing-time trigger
        ldir = os.path.join(base, "live")
        latencies: list[float] = []
        stop = threading.Event()
        owner = journaled.JournaledQueue(ldir, journaled.QueueConfig(sync=0.005))

        def produce() -> None:
            while not stop.is_set():
                owner.put(b"tick")
                time.sleep(0.02)

        def sink(df, _batch_id: int) -> None:
            now = time.time()
            latencies.extend(now - r.timestamp.timestamp() for r in df.select("timestamp").collect())

        query = (
            spark.readStream.format("journaled")
            .load(ldir)
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", os.path.join(base, "cp-latency"))
            .trigger(processingTime=f"{args.trigger_ms} milliseconds")
            .start()
        )
        producer = threading.Thread(target=produce)
        time.sleep(3)  # let the first (slow) batch pass before measuring
        producer.start()
        time.sleep(args.latency_seconds)
        stop.set()
        producer.join()
        time.sleep(2 * args.trigger_ms / 1000 + 1)
        query.stop()
        owner.close()
        if latencies:
            latencies.sort()
            p95 = latencies[int(0.95 * (len(latencies) - 1))]
            print(
                f"latency, processingTime={args.trigger_ms} ms: median "
                f"{statistics.median(latencies) * 1000:.0f} ms, "
                f"p95 {p95 * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms over {len(latencies)} items"
            )
        spark.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
