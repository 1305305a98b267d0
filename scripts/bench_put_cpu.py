#!/usr/bin/env python3
"""The put rows of bench_targets.py in CPU time of the calling thread (``time.thread_time``), for a
machine too loaded for wall-clock ratios (issue 37): best of 5 rounds of 50k calls each, the kinds
alternating, of journaled's single put (100 B and 1 KiB, one reader, ``sync=0.05``), a put of 100 B
with a key, with the same headers every time (``headers100``: the put path remembers them) and with
a header whose value changes every put (``hvar100``: checked afresh each time), and queuelib's
``FifoDiskQueue.push`` (100 B, 1 KiB).  What runs on other threads (journaled's periodic write-out
and fdatasync) is not counted; queuelib does its ``os.write`` per push on the calling thread, and
that is counted.  Run it with the tree measured and queuelib on ``PYTHONPATH``.  ``--no-reader``
and ``--gc-off`` take the reader's side and the cyclic collector out, to see where a put's time
goes."""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import tempfile
import time

from journaled import JournaledQueue, QueueConfig

N = 50_000
KINDS = ("q100", "plain100", "key100", "headers100", "hvar100", "q1k", "plain1k")


def one_round(kind: str, path: str, reader: bool = True, gc_off: bool = False) -> float:
    """CPU seconds of the calling thread for N calls of ``kind`` (journaled's: with one reader,
    or none; with the collector on, or off while timed)."""
    p100, p1k = os.urandom(100), os.urandom(1024)
    keys = [b"k%d" % i for i in range(N)]
    headers = {"trace": b"0123456789abcdef"}
    if kind.startswith("q"):
        from queuelib import FifoDiskQueue  # not a dependency: checked in main()

        fq = FifoDiskQueue(path)
        push, payload = fq.push, (p100 if kind == "q100" else p1k)
        t0 = time.thread_time()
        for _ in range(N):
            push(payload)
        took = time.thread_time() - t0
        fq.close()
        return took
    with JournaledQueue(path, QueueConfig(sync=0.05)) as q:
        if reader:
            q.reader("r")
        put = q.put
        if gc_off:
            gc.disable()
        t0 = time.thread_time()
        if kind == "plain100":
            for _ in range(N):
                put(p100)
        elif kind == "plain1k":
            for _ in range(N):
                put(p1k)
        elif kind == "key100":
            for k in keys:
                put(p100, key=k)
        elif kind == "hvar100":
            for k in keys:
                put(p100, headers={"trace": k})
        else:
            for _ in range(N):
                put(p100, headers=headers)
        took = time.thread_time() - t0
        gc.enable()
        return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--no-reader", action="store_true", help="journaled's queues without a reader")
    parser.add_argument("--gc-off", action="store_true", help="the cyclic collector off while timed")
    args = parser.parse_args()
    try:
        import queuelib  # noqa: F401
    except ImportError:
        raise SystemExit("queuelib is needed (pip install queuelib, or put it on PYTHONPATH)") from None
    root = tempfile.mkdtemp(prefix="bench-put-cpu-")
    best: dict[str, float] = {}
    try:
        for r in range(5):
            for kind in KINDS:
                path = os.path.join(root, f"{kind}{r}")
                took = one_round(kind, path, not args.no_reader, args.gc_off)
                best[kind] = min(best.get(kind, 1e9), took / N * 1e9)
                shutil.rmtree(path, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    b = best
    print(" ".join(f"{k}={v:.0f}ns" for k, v in b.items()))
    print(
        f"  put100/queuelib={b['q100'] / b['plain100']:.2f}x put1k/queuelib={b['q1k'] / b['plain1k']:.2f}x "
        f"key/plain={b['plain100'] / b['key100']:.2f}x headers/plain={b['plain100'] / b['headers100']:.2f}x "
        f"hvar/plain={b['plain100'] / b['hvar100']:.2f}x"
    )


if __name__ == "__main__":
    main()
