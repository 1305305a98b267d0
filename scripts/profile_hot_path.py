#!/usr/bin/env python3
"""Profile journaled's hot paths and print where the time goes.

Three workloads, each on a fresh temporary queue (periodic sync, the default policy):

* ``put``: single-threaded ``q.put`` of 1 KiB items;
* ``put_many``: ``q.put_many`` of 100-byte items in batches of 1000;
* ``get``: single-threaded ``reader.get`` + ``reader.commit`` of 1 KiB items already put.

For each it prints the rate without a profiler (items/s), then the top entries of a cProfile
run sorted by own time.  ``--syscalls`` also counts write/fsync calls per item through the
library's file-I/O seam (the target: well under one write per put under periodic sync).
``--py-spy DIR`` additionally samples each workload with py-spy (``pip install -e '.[bench]'``)
into flame graphs ``DIR/<workload>.svg``; it needs ptrace permission (root or
``kernel.yama.ptrace_scope=0``).

Usage::

    python scripts/profile_hot_path.py                  # all three, 200k items each
    python scripts/profile_hot_path.py put_many --items 1000000 --top 15 --syscalls
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from journaled import JournaledQueue, QueueConfig
from journaled.disk import fileio  # noqa: E402

WORKLOADS = ("put", "put_many", "get")


class CountingOps(fileio.FileOps):
    """Counts the library's file operations (the seam every write/fsync goes through)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> int:
        self.calls["write"] += 1
        return super().write(fd, data)

    def fdatasync(self, fd: int) -> None:
        self.calls["fdatasync"] += 1
        super().fdatasync(fd)

    def fsync(self, fd: int) -> None:
        self.calls["fsync"] += 1
        super().fsync(fd)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        self.calls["pread"] += 1
        return super().pread(fd, size, offset)


def workload(name: str, items: int, size: int | None) -> tuple[Callable[[], None], Callable[[], None], int]:
    """(setup+run closure, cleanup, item count) for one workload on a fresh queue."""
    path = tempfile.mkdtemp(prefix="profile-")
    q = JournaledQueue(path, QueueConfig(sync=0.05))
    reader = q.reader("profile")
    if name == "put":
        payload = os.urandom(size or 1024)

        def run() -> None:
            put = q.put
            for _ in range(items):
                put(payload)
            q.sync()

    elif name == "put_many":
        batch = [os.urandom(size or 100)] * 1000

        def run() -> None:
            put_many = q.put_many
            for _ in range(items // 1000):
                put_many(batch)
            q.sync()

    else:
        q.put_many([os.urandom(size or 1024)] * items)
        q.sync()

        def run() -> None:
            get, commit = reader.get, reader.commit
            for _ in range(items):
                commit(get(block=False))

    def cleanup() -> None:
        q.close()
        shutil.rmtree(path, ignore_errors=True)

    return run, cleanup, items


def timed(name: str, items: int, size: int | None) -> float:
    run, cleanup, n = workload(name, items, size)
    try:
        t0 = time.perf_counter()
        run()
        return n / (time.perf_counter() - t0)
    finally:
        cleanup()


def profiled(name: str, items: int, size: int | None, top: int) -> str:
    run, cleanup, _n = workload(name, items, size)
    prof = cProfile.Profile()
    try:
        prof.runcall(run)
    finally:
        cleanup()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.strip_dirs().sort_stats("tottime").print_stats(top)
    text = out.getvalue()
    # keep the table, drop pstats' preamble about ordering/restrictions
    return text[text.index("   ncalls") :] if "   ncalls" in text else text


def syscalls(name: str, items: int, size: int | None) -> dict[str, float]:
    ops = CountingOps()
    with fileio.use(ops):
        run, cleanup, n = workload(name, items, size)
        ops.calls.clear()  # count the workload, not opening/setup
        try:
            run()
        finally:
            cleanup()
    return {k: v / n for k, v in sorted(ops.calls.items())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workloads", nargs="*", metavar="WORKLOAD", help="put, put_many, get (default: all)")
    ap.add_argument("--items", type=int, default=200_000, help="items per workload (200000)")
    ap.add_argument("--size", type=int, default=None, help="item bytes (put/get 1024, put_many 100)")
    ap.add_argument("--top", type=int, default=12, help="profile entries to show (12)")
    ap.add_argument("--syscalls", action="store_true", help="count library file ops per item")
    ap.add_argument("--py-spy", dest="py_spy", default=None, metavar="DIR", help="also record flame graphs")
    ap.add_argument("--run-only", default=None, help=argparse.SUPPRESS)  # py-spy's child
    args = ap.parse_args(argv)
    if args.run_only:
        run, cleanup, _n = workload(args.run_only, args.items, args.size)
        try:
            run()
        finally:
            cleanup()
        return 0
    unknown = set(args.workloads) - set(WORKLOADS)
    if unknown:
        ap.error(f"unknown workload(s) {sorted(unknown)}; choose from {', '.join(WORKLOADS)}")
    for name in args.workloads or WORKLOADS:
        rate = timed(name, args.items, args.size)
        print(f"=== {name}: {rate:,.0f} items/s without profiler ({args.items:,} items)")
        if args.syscalls:
            per = syscalls(name, args.items, args.size)
            print("    file ops per item: " + (", ".join(f"{k} {v:.5f}" for k, v in per.items()) or "none"))
        print(profiled(name, args.items, args.size, args.top))
        if args.py_spy:
            os.makedirs(args.py_spy, exist_ok=True)
            svg = os.path.join(args.py_spy, f"{name}.svg")
            cmd: list[Any] = [
                os.path.join(os.path.dirname(sys.executable), "py-spy"),
                "record",
                "-o",
                svg,
                "--rate",
                "500",
                "--",
                sys.executable,
                os.path.abspath(__file__),
                "--run-only",
                name,
                "--items",
                str(args.items),
            ]
            if args.size:
                cmd += ["--size", str(args.size)]
            done = subprocess.run(cmd, capture_output=True, text=True)
            print(
                f"    py-spy: {svg}"
                if done.returncode == 0
                else f"    py-spy failed: {done.stderr.strip()[-300:]}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
