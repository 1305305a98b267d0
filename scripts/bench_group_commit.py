#!/usr/bin/env python3
"""Group commit under ``sync="always"``: durable puts per second against producer threads.

    python scripts/bench_group_commit.py [--threads 1,2,4,8] [--seconds 2] [--rounds 5]
                                         [--size 1024] [--dir PATH] [--tree PATH] [--json]

Each run opens a fresh queue with ``sync="always"`` in a new directory under ``--dir`` (default
/var/tmp: it must be a real disk, not tmpfs, or fsync costs nothing and the figures mean
nothing), starts N threads that each call ``put`` with one ``--size`` byte item in a loop for
``--seconds``, and counts puts and the journal's fsync rounds (``q.fsync_count``).  The thread
counts alternate within each round (1, 2, 4, 8, 1, 2, ...) so that a slower minute of the
shared machine hits every count alike; the table shows the median over ``--rounds`` of puts/s,
fsyncs/s, puts per fsync, and the ratio of each run's puts/s to the 1-thread run of the same
round.  A raw ``os.write`` + ``fdatasync`` loop of the same size is measured in every round too
(``raw``), the floor a single thread cannot beat.  On a shared machine the disk's fsync time
swings with the neighbours' I/O; ``--fake-fsync SECONDS`` replaces the journal's fdatasync by a
sleep of that length (through the ``fileio`` seam), which compares schemes without that noise.

``--tree`` measures another checkout's ``journaled`` package (e.g. main exported with
``git archive``).  ``--compare PATH`` measures both (this one and the one at PATH), each run in
its own subprocess, alternating the two in every round, and adds their ratio per thread count:
before/after figures from one run.
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
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


def raw_fdatasync(
    directory: str, size: int, seconds: float
) -> tuple[float, float, float, float, float, float]:
    """``(writes/s, fsyncs/s, writes per fsync)`` of one thread appending and fdatasyncing."""
    path = os.path.join(directory, "raw")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    data = b"r" * size
    n = 0
    try:
        deadline = time.monotonic() + seconds
        start = time.monotonic()
        while time.monotonic() < deadline:
            os.write(fd, data)
            os.fdatasync(fd)
            n += 1
        took = time.monotonic() - start
    finally:
        os.close(fd)
    return n / took, n / took, 1.0, 0.0, 0.0, 0.0


def timed_fsyncs(fake: float = 0.0) -> tuple[Any, list[tuple[float, float]]]:
    """File operations (for ``fileio.use``) whose ``fdatasync`` appends its (start, end) on
    ``time.perf_counter`` to the returned list; ``fake`` seconds of sleep replace the real one."""
    from journaled.disk import fileio

    spans: list[tuple[float, float]] = []

    class TimedSync(fileio.FileOps):
        def fdatasync(self, fd: int) -> None:
            t = time.perf_counter()
            if fake:
                time.sleep(fake)
            else:
                super().fdatasync(fd)
            spans.append((t, time.perf_counter()))

    return TimedSync(), spans


def durable_puts(
    directory: str, threads: int, size: int, seconds: float, fake: float = 0.0
) -> tuple[float, float, float, float, float, float]:
    """``(puts/s, fsyncs/s, puts per fsync, process CPU microseconds per put, median fdatasync
    microseconds, median microseconds from one fdatasync's end to the next one's start)`` of
    ``threads`` producers under ``sync="always"``.  The last is the time a round spends outside
    the fsync: the batch's puts, their wake-ups and the flush."""
    from journaled.disk import fileio

    ops, spans = timed_fsyncs(fake)
    with fileio.use(ops):
        rate, fs, per, cpu = _durable_puts(directory, threads, size, seconds)
    spans = spans[1:]  # the header's, at open
    fsync_us = statistics.median(e - s for s, e in spans) * 1e6 if spans else 0.0
    gaps = [spans[i + 1][0] - spans[i][1] for i in range(len(spans) - 1)]
    gap_us = statistics.median(gaps) * 1e6 if gaps else 0.0
    return rate, fs, per, cpu, fsync_us, gap_us


def _durable_puts(
    directory: str, threads: int, size: int, seconds: float
) -> tuple[float, float, float, float]:
    from journaled import JournaledQueue, QueueConfig

    q = JournaledQueue(directory, config=QueueConfig(sync="always"), name="q")
    data = b"p" * size
    counts = [0] * threads
    stop = threading.Event()
    start = threading.Barrier(threads + 1)

    def work(t: int) -> None:
        put = q.put
        start.wait()
        n = 0
        while not stop.is_set():
            put(data)
            n += 1
        counts[t] = n

    pool = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(threads)]
    for th in pool:
        th.start()
    try:
        start.wait()
        fsyncs0 = q.fsync_count
        cpu0 = time.process_time()
        t0 = time.monotonic()
        deadline = t0 + seconds
        while (left := deadline - time.monotonic()) > 0:
            stop.wait(left)
        stop.set()
        for th in pool:
            th.join()
        took = time.monotonic() - t0
        cpu = time.process_time() - cpu0
        fsyncs = q.fsync_count - fsyncs0
    finally:
        stop.set()
        q.close()
    puts = sum(counts)
    return puts / took, fsyncs / took, puts / max(1, fsyncs), cpu / max(1, puts) * 1e6


def compare(args: argparse.Namespace) -> int:
    """Both checkouts, every run in a subprocess, alternating: medians and after/before ratios."""
    counts = [int(x) for x in args.threads.split(",")]
    sides = {
        "this": os.path.abspath(args.tree or os.path.join(HERE, "..")),
        "other": os.path.abspath(args.compare),
    }
    runs: dict[tuple[str, int], list[tuple[float, ...]]] = {}
    parent = tempfile.mkdtemp(prefix="bench_gc_", dir=args.dir)
    try:
        for r in range(args.rounds):
            order = list(sides.items()) if r % 2 == 0 else list(sides.items())[::-1]
            for n in counts:
                for side, tree in order:
                    d = tempfile.mkdtemp(dir=parent)
                    cmd = [sys.executable, __file__, "--tree", tree, "--size", str(args.size)]
                    cmd += ["--fake-fsync", str(args.fake_fsync)]
                    out = subprocess.run(
                        [*cmd, "--one", d, str(n), str(args.seconds)],
                        check=True,
                        capture_output=True,
                        text=True,
                    ).stdout
                    runs.setdefault((side, n), []).append(tuple(json.loads(out)))
                    shutil.rmtree(d)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    print(f"this = {sides['this']}, other = {sides['other']}; {args.size} B puts, sync='always',")
    print(f"{args.rounds} rounds x {args.seconds:g} s per run, in {args.dir}; medians")
    print(
        f"{'threads':>8} {'this puts/s':>12} {'puts/fsync':>11} {'other puts/s':>13} {'puts/fsync':>11}"
        f" {'this/other':>11}   CPU us/put this / other   fsync + gap us this / other"
    )
    one = {side: statistics.median(x[0] for x in runs[(side, counts[0])]) for side in sides}
    for n in counts:
        a, b = runs[("this", n)], runs[("other", n)]
        ma, mb = statistics.median(x[0] for x in a), statistics.median(x[0] for x in b)
        ratio = statistics.median(x[0] / y[0] for x, y in zip(a, b, strict=True))
        print(
            f"{n:>8} {ma:>12,.0f} {statistics.median(x[2] for x in a):>11.2f} {mb:>13,.0f}"
            f" {statistics.median(x[2] for x in b):>11.2f} {ratio:>10.2f}x"
            f"   {statistics.median(x[3] for x in a):.1f} / {statistics.median(x[3] for x in b):.1f}"
            f"   {statistics.median(x[4] for x in a):.0f} + {statistics.median(x[5] for x in a):.0f}"
            f" / {statistics.median(x[4] for x in b):.0f} + {statistics.median(x[5] for x in b):.0f}"
        )
    print(
        f"x {counts[0]} thread(s), medians: "
        + ", ".join(
            f"{n}: this {statistics.median(x[0] for x in runs[('this', n)]) / one['this']:.2f}x"
            f" other {statistics.median(x[0] for x in runs[('other', n)]) / one['other']:.2f}x"
            for n in counts
        )
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2,4,8", help="comma-separated thread counts (default 1,2,4,8)")
    ap.add_argument("--seconds", type=float, default=2.0, help="length of each run (default 2)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds; the median is shown (default 5)")
    ap.add_argument("--size", type=int, default=1024, help="payload bytes per put (default 1024)")
    ap.add_argument("--dir", default="/var/tmp", help="parent of the queue directories (a real disk)")
    ap.add_argument("--tree", help="import journaled from this checkout instead")
    ap.add_argument("--json", action="store_true", help="print the medians as JSON")
    ap.add_argument(
        "--fake-fsync",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="replace the journal's fdatasync by a sleep this long (the scheme without the disk's noise)",
    )
    ap.add_argument("--compare", metavar="PATH", help="also measure the journaled of this checkout")
    ap.add_argument("--one", nargs=3, metavar=("DIR", "THREADS", "SECONDS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.tree:
        sys.path.insert(0, os.path.abspath(args.tree))
    if args.one:  # a single run for --compare, in a fresh interpreter
        d, n, secs = args.one
        n = int(n)
        res = durable_puts(d, n, args.size, float(secs), args.fake_fsync)
        print(json.dumps(res))
        return 0
    if args.compare:
        return compare(args)
    counts = [int(x) for x in args.threads.split(",")]
    if 1 not in counts:
        counts.insert(0, 1)  # every ratio is to one thread
    runs: dict[str, list[tuple[float, float, float, float]]] = {str(n): [] for n in counts}
    runs["raw"] = []
    parent = tempfile.mkdtemp(prefix="bench_gc_", dir=args.dir)
    try:
        for _ in range(args.rounds):
            this_round: dict[int, tuple[float, float, float, float, float, float]] = {}
            for n in counts:
                d = tempfile.mkdtemp(dir=parent)
                this_round[n] = durable_puts(d, n, args.size, args.seconds, args.fake_fsync)
                shutil.rmtree(d)
            d = tempfile.mkdtemp(dir=parent)
            raw = raw_fdatasync(d, args.size, args.seconds)
            shutil.rmtree(d)
            one = this_round[1][0]
            for n, (rate, fs, per, *_rest) in this_round.items():
                runs[str(n)].append((rate, fs, per, rate / one))
            runs["raw"].append((*raw[:3], raw[0] / one))
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    import journaled

    medians = {
        k: {
            "puts_per_s": statistics.median(r[0] for r in v),
            "fsyncs_per_s": statistics.median(r[1] for r in v),
            "puts_per_fsync": statistics.median(r[2] for r in v),
            "x_one_thread": statistics.median(r[3] for r in v),
            "x_one_thread_all": [round(r[3], 2) for r in v],
        }
        for k, v in runs.items()
    }
    if args.json:
        print(json.dumps({"journaled": journaled.__file__, "medians": medians}, indent=2))
        return 0
    print(f"journaled from {os.path.dirname(journaled.__file__)}; {args.size} B puts, sync='always', ")
    print(f"{args.rounds} rounds x {args.seconds:g} s per run, in {args.dir}; medians")
    print(f"{'threads':>8} {'puts/s':>10} {'fsyncs/s':>10} {'puts/fsync':>11} {'x 1 thread':>11}  per round")
    for k, m in medians.items():
        per_round = " ".join(f"{x:.2f}" for x in m["x_one_thread_all"])
        print(
            f"{k:>8} {m['puts_per_s']:>10,.0f} {m['fsyncs_per_s']:>10,.0f} {m['puts_per_fsync']:>11.2f}"
            f" {m['x_one_thread']:>10.2f}x  {per_round}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
