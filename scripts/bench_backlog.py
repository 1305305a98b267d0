#!/usr/bin/env python3
"""Backlog benchmark for reader policies: memory stays bounded however far behind readers are.

Writes a backlog of fixed-size items (default 1 KiB) into a fresh queue with three readers: one
"live" reader consumed by a thread while the backlog is written, and two ("far1", "far2") that
do not consume until the end, so the whole backlog is on disk for them.  Then:

* times ``q.reader(..., start=<time of the middle item>)`` (binary search over files, one file
  scanned) on that journal;
* measures get+commit throughput in memory (a reader whose items fit in ``max_memory``);
* drains far1 and far2 together, interleaved (read-behind), and reports their throughput and
  how many bytes the journal reads took (to show what fan-out readers re-read);
* reports the peak RSS of the process (``ru_maxrss``), which must stay under 100 MB with the
  default ``max_memory`` (16 MiB).

Examples::

    python scripts/bench_backlog.py                      # 256 MiB backlog
    python scripts/bench_backlog.py --size 1G
    python scripts/bench_backlog.py --size 5G --dir /big/disk/tmp

Figures go to stdout; nothing is asserted except the RSS bound (exit status 1 if exceeded).

``--flat N`` instead measures issue 14's "flat with backlog" target: two queues, one holding a
1,000-item backlog and one an N-item backlog (``--item-size`` bytes each) for one reader; single
``put`` and ``get``+``commit`` rates are measured alternately on the two (best of ``--rounds``,
``--ops`` operations each), then each queue is closed and the time to reopen it (open, attach
the reader, first ``get``) is taken.  Target: both rates within 10 % of the 1,000-item ones,
reopen under 1 s::

    python scripts/bench_backlog.py --flat 10000000 --item-size 100
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from journaled import Empty, JournaledQueue, QueueConfig, ReaderConfig
from journaled.disk import fileio  # noqa: E402

MiB = 1024 * 1024


def parse_size(text: str) -> int:
    units = {"K": 1024, "M": MiB, "G": 1024 * MiB}
    text = text.strip().upper().rstrip("B").rstrip("I")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


class CountingOps(fileio.FileOps):
    """Counts bytes read from journal files (to see what fan-out readers re-read)."""

    def __init__(self) -> None:
        self.read_bytes = 0

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        data = super().pread(fd, size, offset)
        self.read_bytes += len(data)
        return data


def drain(reader, limit: int | None = None) -> int:
    n = 0
    while limit is None or n < limit:
        try:
            item = reader.get(block=False)
        except Empty:
            break
        reader.commit(item)
        n += 1
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="256M", help="backlog size, e.g. 256M, 1G, 5G (default 256M)")
    ap.add_argument("--item-size", type=int, default=1024, help="payload bytes per item (default 1024)")
    ap.add_argument("--batch", type=int, default=256, help="items per put_many (default 256)")
    ap.add_argument(
        "--max-memory", default=None, help="ReaderConfig.max_memory (default: the library default)"
    )
    ap.add_argument("--dir", default=None, help="parent directory for the queue (default: system temp)")
    ap.add_argument("--keep", action="store_true", help="keep the queue directory afterwards")
    ap.add_argument("--rss-limit-mb", type=float, default=100.0, help="fail if peak RSS exceeds this")
    ap.add_argument(
        "--flat", type=int, default=0, help="measure put/get+commit at this backlog vs 1,000 items"
    )
    ap.add_argument("--ops", type=int, default=50_000, help="--flat: operations per measurement")
    ap.add_argument("--rounds", type=int, default=3, help="--flat: measurements per case (best kept)")
    args = ap.parse_args()
    if args.flat:
        return flat(args)

    size = parse_size(args.size)
    n_items = max(args.batch, size // args.item_size)
    rcfg = ReaderConfig() if args.max_memory is None else ReaderConfig(max_memory=parse_size(args.max_memory))
    base = tempfile.mkdtemp(prefix="bench-backlog-", dir=args.dir)
    path = os.path.join(base, "q")
    print(
        f"backlog: {n_items} items x {args.item_size} B = {n_items * args.item_size / MiB:.0f} MiB; "
        f"max_memory={rcfg.max_memory / MiB:.1f} MiB; dir={path}"
    )
    print(f"peak RSS at start: {peak_rss_mb():.1f} MB")
    try:
        with JournaledQueue(path, QueueConfig()) as q:
            live = q.reader("live", rcfg)
            far1 = q.reader("far1", rcfg)
            far2 = q.reader("far2", rcfg)
            stop = threading.Event()
            live_count = [0]

            def consume_live() -> None:
                while not stop.is_set() or live_count[0] < n_items:
                    try:
                        item = live.get(timeout=0.2)
                    except Empty:
                        continue
                    live.commit(item)
                    live_count[0] += 1

            t = threading.Thread(target=consume_live)
            t.start()
            chunk = [os.urandom(args.item_size) for _ in range(args.batch)]
            mid_time = None
            mid_id = 0
            t0 = time.perf_counter()
            done = 0
            while done < n_items:
                k = min(args.batch, n_items - done)
                if mid_time is None and done >= n_items // 2:
                    time.sleep(0.002)  # add times have ms resolution: a clean boundary
                    mid_time = time.time()
                    mid_id = q.stats().next_id
                    time.sleep(0.002)
                q.put_many(chunk[:k])
                done += k
            q.sync()
            t_write = time.perf_counter() - t0
            stop.set()
            t.join()
            t_live = time.perf_counter() - t0
            st = q.stats()
            print(
                f"write: {n_items / t_write:,.0f} items/s, "
                f"{n_items * args.item_size / MiB / t_write:,.1f} MiB/s "
                f"({t_write:.1f} s) with the live reader consuming alongside (done after {t_live:.1f} s)"
            )
            print(
                f"journal: {st.journal_files} files, {st.journal_bytes / MiB:,.0f} MiB; "
                f"far1 backlog {st.readers[0].backlog_items:,} items, "
                f"in memory {st.readers[0].bytes_in_memory / MiB:.1f} MiB, "
                f"on disk ~{st.readers[0].bytes_on_disk / MiB:,.0f} MiB"
            )
            print(f"peak RSS after writing: {peak_rss_mb():.1f} MB")

            # stats cost
            t0 = time.perf_counter()
            for _ in range(1000):
                q.stats()
            print(
                f"q.stats(): {(time.perf_counter() - t0) * 1000:.3f} us per call "
                f"({st.journal_files} files, 3 readers)"
            )

            # start-from-time
            assert mid_time is not None
            t0 = time.perf_counter()
            tr = q.reader("from-time", ReaderConfig(start=mid_time))
            t_start = time.perf_counter() - t0
            first = tr.get(block=False)
            print(
                f"start-from-time: reader placed at id {first.id} (expected {mid_id}) "
                f"in {t_start * 1000:.1f} ms"
            )
            tr.abort(first)
            q.remove_reader("from-time")

            # in-memory throughput: batches that fit in max_memory, put and then taken
            mem_items = max(args.batch, (rcfg.max_memory // 2) // args.item_size // args.batch * args.batch)
            rounds = max(1, min(20, n_items // mem_items))
            t_put = t_get = 0.0
            taken = 0
            for _ in range(rounds):
                t0 = time.perf_counter()
                for _ in range(mem_items // args.batch):
                    q.put_many(chunk)
                t_put += time.perf_counter() - t0
                t0 = time.perf_counter()
                taken += drain(live)
                t_get += time.perf_counter() - t0
            print(
                f"in memory (live reader): get+commit {taken / t_get:,.0f} items/s; "
                f"put (3 readers) {taken / t_put:,.0f} items/s; batches of {mem_items} items"
            )
            # read-behind drain of the two far readers, interleaved (same distance behind)
            ops = CountingOps()
            saved = fileio.ops
            fileio.ops = ops
            try:
                t0 = time.perf_counter()
                n1 = n2 = 0
                step = 10_000
                while True:
                    a = drain(far1, step)
                    b = drain(far2, step)
                    n1 += a
                    n2 += b
                    if not a and not b:
                        break
                t_rb = time.perf_counter() - t0
            finally:
                fileio.ops = saved
            total = n1 + n2
            print(
                f"read-behind (far1+far2 interleaved) get+commit: {total / t_rb:,.0f} items/s, "
                f"{total * args.item_size / MiB / t_rb:,.1f} MiB/s of payload ({t_rb:.1f} s)"
            )
            print(
                f"journal bytes read by the two far readers: {ops.read_bytes / MiB:,.0f} MiB "
                f"for {total * args.item_size / MiB:,.0f} MiB delivered "
                f"(each reader reads its own copy; the second is served by the page cache)"
            )
            print(f"peak RSS at the end: {peak_rss_mb():.1f} MB")
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    peak = peak_rss_mb()
    ok = peak < args.rss_limit_mb
    print(f"RESULT peak RSS {peak:.1f} MB {'<' if ok else '>='} {args.rss_limit_mb:.0f} MB")
    return 0 if ok else 1


#: Journal bytes per item besides its payload (a PUT record's header), rounded up.
RECORD_BYTES = 40


def flat(args: argparse.Namespace) -> int:
    sizes = [1000, args.flat]
    need = sum(n + 2 * args.ops * args.rounds for n in sizes) * (args.item_size + RECORD_BYTES)
    free = shutil.disk_usage(args.dir or tempfile.gettempdir()).free
    if need > free * 0.9:
        print(f"--flat {args.flat:,} needs ~{need / MiB:,.0f} MiB; {free / MiB:,.0f} MiB free there (--dir)")
        return 2
    base = tempfile.mkdtemp(prefix="bench-flat-", dir=args.dir)
    payload = os.urandom(args.item_size)
    load_before = os.getloadavg()
    queues = {}
    try:
        for n in sizes:
            q = JournaledQueue(os.path.join(base, f"q{n}"), QueueConfig())
            r = q.reader("r")
            t0 = time.perf_counter()
            for k in range(0, n, 10_000):
                q.put_many([payload] * min(10_000, n - k))
            q.sync()
            st = q.stats()
            print(
                f"backlog {n:,} items x {args.item_size} B written in {time.perf_counter() - t0:.1f} s "
                f"({st.journal_files} files, {st.journal_bytes / MiB:,.0f} MiB)",
                flush=True,
            )
            queues[n] = (q, r)
        rates: dict[int, tuple[list[float], list[float]]] = {n: ([], []) for n in sizes}
        for _ in range(args.rounds):
            for n in sizes:  # alternately, so drift on a shared machine hits both alike
                q, r = queues[n]
                t0 = time.perf_counter()
                for _ in range(args.ops):
                    q.put(payload)
                rates[n][0].append(args.ops / (time.perf_counter() - t0))
                t0 = time.perf_counter()
                for _ in range(args.ops):
                    r.commit(r.get(block=False))
                rates[n][1].append(args.ops / (time.perf_counter() - t0))
        for n in sizes:
            queues[n][0].close()
        reopen = {}
        for n in sizes:
            t0 = time.perf_counter()
            q = JournaledQueue(os.path.join(base, f"q{n}"), QueueConfig())
            t_open = time.perf_counter() - t0
            r = q.reader("r")
            first = r.get(block=False)
            reopen[n] = (t_open, time.perf_counter() - t0)
            r.abort(first)
            q.close()
        small, big = sizes
        put_ratio = max(rates[big][0]) / max(rates[small][0])
        get_ratio = max(rates[big][1]) / max(rates[small][1])
        for n in sizes:
            print(
                f"backlog {n:>12,}: put {max(rates[n][0]):10,.0f}/s  get+commit {max(rates[n][1]):10,.0f}/s  "
                f"reopen {reopen[n][0] * 1000:6.0f} ms (first item after {reopen[n][1] * 1000:.0f} ms)"
            )
        ok = put_ratio >= 0.9 and get_ratio >= 0.9 and reopen[big][1] < 1.0
        print(
            f"RESULT {big:,} vs {small:,}: put {put_ratio:.2f}x, "
            f"get+commit {get_ratio:.2f}x (target >= 0.90); "
            f"reopen to first item {reopen[big][1]:.2f} s (target < 1 s): {'met' if ok else 'not met'}"
        )
        load = " ".join(f"{a:.2f}/{b:.2f}" for a, b in zip(load_before, os.getloadavg(), strict=True))
        print(f"load average (1, 5, 15 min) before/after: {load}")
        return 0
    finally:
        for q, _ in queues.values():
            q.close()
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
