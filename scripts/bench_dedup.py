#!/usr/bin/env python3
"""What de-duplication by key costs (``QueueConfig(dedup_window=...)``), measured in one run.

    python scripts/bench_dedup.py [--keys 1000000] [--key-size 16] [--puts 200000] [--batch 100]
                                  [--dir DIR] [--json]

1. **Memory of the window at ``--keys`` keys**: a ``KeyWindow`` (journaled/owner/dedup.py)
   filled with that many distinct keys of ``--key-size`` bytes, measured with ``tracemalloc``
   (what Python allocated, the keys' own bytes objects included: the window keeps them alive)
   and as the process's resident set growth (RSS, from /proc/self/statm), in bytes per key.
2. **Puts per second**: ``--puts`` keyed items put with ``put_many`` in batches of ``--batch``
   and one by one with ``put(key=)``, each into a fresh queue without and with a window (every
   key distinct, so both store everything), then the same puts again into the window's queue
   (every one a duplicate: nothing stored).  Default sync policy, one reader attached.
3. **Reopen**: the time to open that queue again, when the window is read back from the journal.

Queues go to ``--dir`` (default: a temporary directory, on /dev/shm when there is one).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import tempfile
import time
import tracemalloc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from journaled import JournaledQueue, QueueConfig  # noqa: E402
from journaled.owner.dedup import KeyWindow  # noqa: E402


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def make_keys(n: int, size: int, salt: bytes = b"") -> list[bytes]:
    return [(salt + b"%d-" % i).ljust(size, b"k")[: max(size, len(salt) + 8)] for i in range(n)]


def window_memory(n: int, key_size: int) -> dict[str, float]:
    gc.collect()
    rss0 = rss_bytes()
    tracemalloc.start()
    window = KeyWindow(3600.0)
    now = int(time.time() * 1000)
    for i in range(n):  # the keys made one by one: nothing but the window holds them
        window.add((b"%d-" % i).ljust(key_size, b"k"), i, now + i // 1000)
    traced, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = rss_bytes() - rss0
    assert len(window) == n
    del window
    return {"keys": n, "traced_bytes_per_key": traced / n, "rss_bytes_per_key": rss / n}


def puts(where: str, config: QueueConfig, keys: list[bytes], batch: int, single: bool) -> tuple[float, int]:
    """Items/s putting ``keys`` (one payload each) into the queue at ``where``; items stored."""
    with JournaledQueue(where, config) as q:
        q.reader("r")
        before = q.stats().put
        data = b"x" * 100
        t0 = time.perf_counter()
        if single:
            put = q.put
            for key in keys:
                put(data, key=key)
        else:
            put_many = q.put_many
            for i in range(0, len(keys), batch):
                chunk = keys[i : i + batch]
                put_many([data] * len(chunk), keys=chunk)
        elapsed = time.perf_counter() - t0
        return len(keys) / elapsed, q.stats().put - before


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000, help="keys in the window measured for memory")
    ap.add_argument("--key-size", type=int, default=16, help="bytes per key")
    ap.add_argument("--puts", type=int, default=200_000, help="keyed items put per throughput case")
    ap.add_argument("--batch", type=int, default=100, help="items per put_many")
    ap.add_argument("--dir", default=None, help="where the queues go (default: a temporary directory)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = ap.parse_args()

    out: dict[str, object] = {"memory": window_memory(args.keys, args.key_size)}
    base = args.dir or ("/dev/shm" if os.path.isdir("/dev/shm") else None)
    tmp = tempfile.mkdtemp(prefix="bench_dedup.", dir=base)
    try:
        rates: dict[str, float] = {}
        for single in (False, True):
            how = "put" if single else f"put_many({args.batch})"
            keys = make_keys(args.puts, args.key_size, salt=b"s" if single else b"m")
            off_dir, on_dir = os.path.join(tmp, f"off-{single}"), os.path.join(tmp, f"on-{single}")
            rates[f"{how} keyed, no window"], _ = puts(off_dir, QueueConfig(), keys, args.batch, single)
            on = QueueConfig(dedup_window=3600.0)
            rates[f"{how} keyed, window, all new"], stored = puts(on_dir, on, keys, args.batch, single)
            assert stored == len(keys), stored
            rates[f"{how} keyed, window, all duplicates"], stored = puts(on_dir, on, keys, args.batch, single)
            assert stored == 0, stored
            if not single:
                t0 = time.perf_counter()
                JournaledQueue(on_dir, on).close()
                out["reopen_seconds"] = time.perf_counter() - t0
                out["reopen_keys"] = len(keys)
        out["puts_per_second"] = rates
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    mem = out["memory"]
    assert isinstance(mem, dict)
    traced, rss, n = mem["traced_bytes_per_key"], mem["rss_bytes_per_key"], mem["keys"]
    print(
        f"window of {n:,} keys of {args.key_size} B: "
        f"{traced:.0f} B/key traced ({traced * n / 2**20:.0f} MiB), "
        f"{rss:.0f} B/key RSS ({rss * n / 2**20:.0f} MiB)"
    )
    for name, rate in rates.items():
        print(f"{name:45s} {rate:12,.0f} items/s")
    print(f"reopen reading back {out['reopen_keys']:,} keyed records: {out['reopen_seconds']:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
