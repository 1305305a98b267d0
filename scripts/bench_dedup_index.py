#!/usr/bin/env python3
"""What the de-duplication index ``<queue>.dedup`` costs (journaled/disk/dedupindex.py).

    python scripts/bench_dedup_index.py [--keys 10000 100000] [--key-size 16] [--dir DIR] [--json]
    python scripts/bench_dedup_index.py --throughput [--puts 200000] [--dir DIR]

1. **Bytes on disk per key**: the file's size for ``--keys`` keys of ``--key-size`` bytes.
2. **Time per write**: ``dedup.save_index`` with that many keys in the window (median of 5):
   the copy of the window under the queue lock, and the whole write (encode, write, fsync,
   rename, fsync of the directory), on ``--dir``'s file system.
3. **Read back at open**: decoding the file and filling the window.
4. ``--throughput`` (runs on a tree without the index too, to compare): ``--puts`` keyed puts of
   100 bytes (``put``, one by one), each key distinct, into a queue with a one-hour window and
   1 MiB journal files, while a reader thread gets and commits everything and the background
   checkpoints and archives every 0.1 s (so every pass rewrites the index, which grows to every
   key put: the worst case).  Best of 3.

Queues go to ``--dir`` (default: a temporary directory under the current one: a real disk,
since fsync is what is measured).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from journaled import Empty, JournaledQueue, QueueConfig  # noqa: E402


def index_costs(directory: str, n: int, key_size: int) -> dict[str, float]:
    from journaled.disk import dedupindex
    from journaled.owner.dedup import KeyWindow, save_index

    path = os.path.join(directory, f"costs-{n}")
    with JournaledQueue(path, QueueConfig(dedup_window=3600.0)) as q:
        journal, name = q.journal, q.name
        window = KeyWindow(3600.0)
        now = dedupindex.now_ms()
        for i in range(n):
            window.add((b"%d-" % i).ljust(key_size, b"k"), i + 1, now)
        lock = threading.Lock()
        copies, writes = [], []
        for _ in range(5):
            t0 = time.perf_counter()
            with lock:
                window.expire(now)
                window.snapshot()
            copies.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            save_index(journal, window, lock, 0o600)
            writes.append(time.perf_counter() - t0)
        file = dedupindex.index_path(path, name)
        size = os.path.getsize(file)
        t0 = time.perf_counter()
        index = dedupindex.read_index(file)
        assert index is not None and len(index.entries) == n
        back = KeyWindow(3600.0)
        for key, item_id, add_ms in index.entries:
            back.add(key, item_id, add_ms)
        read = time.perf_counter() - t0
    shutil.rmtree(path)
    return {
        "keys": n,
        "file_bytes": size,
        "bytes_per_key": round(size / n, 2),
        "copy_under_lock_ms": round(statistics.median(copies) * 1000, 2),
        "write_ms": round(statistics.median(writes) * 1000, 2),
        "read_back_ms": round(read * 1000, 2),
    }


def throughput(directory: str, puts: int) -> dict[str, float]:
    spent = [0.0, 0]  # seconds in save_index, calls (where the index exists)
    try:
        from journaled.owner import dedup

        real = dedup.save_index

        def timed(*args, **kwargs):  # type: ignore[no-untyped-def]
            t0 = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - t0
                spent[1] += 1

        dedup.save_index = timed  # type: ignore[assignment]
    except (ImportError, AttributeError):
        pass  # a tree without the index: nothing to time
    best = 0.0
    files = 0
    for run in range(3):
        path = os.path.join(directory, f"tput-{run}")
        cfg = QueueConfig(dedup_window=3600.0, journal_size=1 << 20, checkpoint_interval=0.1)
        with JournaledQueue(path, cfg) as q:
            r = q.reader("r")
            done = threading.Event()

            def consume() -> None:
                while True:
                    try:
                        r.commit(r.get(timeout=0.2))
                    except Empty:
                        if done.is_set():
                            return

            t = threading.Thread(target=consume)
            t.start()
            payload = b"p" * 100
            t0 = time.perf_counter()
            for i in range(puts):
                q.put(payload, key=b"%015d" % i)
            elapsed = time.perf_counter() - t0
            done.set()
            t.join()
            best = max(best, puts / elapsed)
            files = len(os.listdir(path))
        shutil.rmtree(path)
    return {
        "puts": puts,
        "puts_per_s": round(best),
        "entries_left": files,
        "index_writes": spent[1],
        "index_write_s": round(spent[0], 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--key-size", type=int, default=16)
    ap.add_argument("--puts", type=int, default=200_000)
    ap.add_argument("--throughput", action="store_true")
    ap.add_argument("--dir")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    directory = tempfile.mkdtemp(prefix="bench-dedup-index-", dir=args.dir or os.getcwd())
    try:
        if args.throughput:
            results = [throughput(directory, args.puts)]
        else:
            results = [index_costs(directory, n, args.key_size) for n in args.keys]
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    for res in results:
        print(json.dumps(res) if args.json else "  ".join(f"{k}={v}" for k, v in res.items()))


if __name__ == "__main__":
    main()
