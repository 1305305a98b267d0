"""Compressed journals against plain ones, in one run: bytes on disk, put_many rate, read-back rate.

Generates realistic JSON log lines (~200 bytes: repeated field names; timestamps, levels, hosts,
request ids, latencies and messages from a vocabulary), puts them with ``put_many`` in batches into a
queue with ``QueueConfig(compression="zstd")`` and into one without, then drains each with a reader
(get_many + commit).  Prints the figures, their ratios and the machine load (``uptime``).

    python scripts/bench_compression.py --items 1000000
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import shutil
import subprocess
import tempfile
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


def run(path: str, items: list[bytes], batch: int, compression: str | None) -> dict[str, float]:
    cfg = QueueConfig(compression=compression, sync="never")
    with JournaledQueue(path, cfg, name="q") as q:
        q.reader("r")
        t = time.perf_counter()
        for k in range(0, len(items), batch):
            q.put_many(items[k : k + batch])
        put_s = time.perf_counter() - t
    size = sum(os.path.getsize(f) for f in glob.glob(os.path.join(path, "q.[0-9]*")))
    with JournaledQueue(path, name="q") as q:
        r = q.reader("r")
        t = time.perf_counter()
        n = 0
        while True:
            try:
                got = r.get_many(batch, timeout=0)
            except Empty:
                break
            for item in got:
                r.commit(item)
            n += len(got)
        read_s = time.perf_counter() - t
    assert n == len(items), (n, len(items))
    return {"bytes": size, "put_per_s": len(items) / put_s, "read_per_s": len(items) / read_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=1_000_000, help="JSON log lines (default 1,000,000)")
    ap.add_argument("--batch", type=int, default=1000, help="items per put_many and get_many (default 1000)")
    args = ap.parse_args()
    items = lines(args.items)
    print(f"{len(items)} lines, {sum(map(len, items)) / len(items):.0f} B each on average")
    base = tempfile.mkdtemp(prefix="bench_compression_")
    try:
        plain = run(os.path.join(base, "plain"), items, args.batch, None)
        zstd = run(os.path.join(base, "zstd"), items, args.batch, "zstd")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    for name, fig in (("plain", plain), ("zstd", zstd)):
        print(
            f"{name:6} bytes {fig['bytes']:>12,}  put_many {fig['put_per_s']:>10,.0f}/s  "
            f"read {fig['read_per_s']:>10,.0f}/s"
        )
    print(
        f"zstd/plain: bytes {zstd['bytes'] / plain['bytes']:.3f} (goal <= 0.25), "
        f"put_many {zstd['put_per_s'] / plain['put_per_s']:.2f}x (goal >= 0.8), "
        f"read {zstd['read_per_s'] / plain['read_per_s']:.2f}x (goal >= 0.8)"
    )
    print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
