#!/usr/bin/env python3
"""What one ``spool_put`` costs with no adopted keys and with many (the ledger it consults).

    python scripts/bench_spool.py [--keys 12000] [--calls 200] [--dir /dev/shm]

For each key count, a fresh queue directory gets a ledger of that many adopted keys, written line
by line as adoptions append them; then a ``JournaledQueue`` is opened and closed once (this tree's
owner compacts a long ledger at open; older trees leave it as it is).  Then ``--calls`` calls of
``spool_put(dir, [b"x"], key=<new key>)`` are timed one by one and the median is printed, with the
median of the ledger look-up alone.  Runs on tmpfs by default, so fsync costs stay small next to
what the ledger costs.  To compare with another tree, run this script with ``PYTHONPATH`` set to
that tree (the script imports whichever ``journaled`` comes first on the path).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

from crc32c import crc32c

import journaled
from journaled.owner import adoption


def legacy_ledger(path: str, n: int) -> None:
    out = bytearray()
    for i in range(n):
        hexkey = f"batch-{i}".encode().hex()
        for body in (f"P {hexkey} {i} 1 0", f"D {hexkey}"):
            raw = body.encode("ascii")
            out += raw + b" %08x\n" % crc32c(raw)
    with open(path, "wb") as f:
        f.write(out)


def lookup(d: str, key: str) -> bool:
    ledger = adoption.Ledger(d)
    if hasattr(ledger, "adopted"):
        return bool(ledger.adopted(key))
    return key in ledger.adopted_keys()


def measure(root: str, keys: int, calls: int) -> tuple[float, float]:
    qdir = os.path.join(root, f"q{keys}")
    os.makedirs(adoption.spool_dir(qdir))
    legacy_ledger(os.path.join(adoption.spool_dir(qdir), adoption.LEDGER), keys)
    journaled.JournaledQueue(qdir).close()
    put_s, look_s = [], []
    for i in range(calls):
        t0 = time.perf_counter()
        lookup(adoption.spool_dir(qdir), f"new-{i}")
        t1 = time.perf_counter()
        assert adoption.spool_put(qdir, [b"x"], key=f"new-{i}")
        t2 = time.perf_counter()
        look_s.append(t1 - t0)
        put_s.append(t2 - t1)
    if keys:
        assert adoption.spool_put(qdir, [b"x"], key="batch-0") is False
    return statistics.median(put_s), statistics.median(look_s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=12_000, help="adopted keys in the large case (default 12000)")
    ap.add_argument("--calls", type=int, default=200, help="spool_put calls timed per case (default 200)")
    default_dir = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    ap.add_argument("--dir", default=default_dir, help="where the scratch queues go (default tmpfs)")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="bench-spool-", dir=args.dir)
    try:
        print(f"journaled from {os.path.dirname(journaled.__file__)}")
        for keys in (0, args.keys):
            put, look = measure(root, keys, args.calls)
            print(f"{keys:>7} adopted keys: spool_put {put * 1e3:7.3f} ms", end="   ")
            print(f"ledger look-up {look * 1e3:7.3f} ms")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
