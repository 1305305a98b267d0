#!/usr/bin/env python3
"""A reader's memory and the first get after a reopen, with many empty items.

    python scripts/bench_memory.py [--items 2000000] [--max-memory 1048576] [--base REV] [--json]

One fresh interpreter per tree (this working tree, and ``--base`` exported with ``git archive``
when given) puts ``--items`` empty items (``put_many`` in batches of ``--batch``) into a queue on
tmpfs with one reader under ``max_memory``, ``sync="never"``, and reports:

* ``rss_growth_mb``: VmRSS after the puts minus VmRSS before the queue was opened;
* ``in_memory``: the reader's ``items_in_memory`` after the puts;
* ``first_get_s``: after close and reopen, the time of the reader's first ``get`` (which reads
  the backlog back from the journal under the queue lock), and ``in_memory_after`` it.

Figures swing with the machine's load; compare trees measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RUNNER = r"""
import sys, time, tempfile, shutil, json
sys.path.insert(0, sys.argv[1])
from journaled import JournaledQueue, QueueConfig, ReaderConfig
items, max_memory, batch, where = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] or None

def rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])

cfg = QueueConfig(sync="never")
rc = ReaderConfig(max_memory=max_memory)
d = tempfile.mkdtemp(dir=where)
try:
    before = rss_kb()
    with JournaledQueue(d, cfg) as q:
        r = q.reader("r", rc)
        empties = [b""] * batch
        left = items
        while left:
            q.put_many(empties[: min(batch, left)])
            left -= min(batch, left)
        grown = rss_kb() - before
        in_memory = r.stats().items_in_memory
    with JournaledQueue(d, cfg) as q:
        r = q.reader("r", rc)
        t0 = time.perf_counter()
        item = r.get(block=False)
        first_get = time.perf_counter() - t0
        in_memory_after = r.stats().items_in_memory
finally:
    shutil.rmtree(d, ignore_errors=True)
print(json.dumps({"rss_growth_mb": grown / 1024, "in_memory": in_memory, "first_get_s": first_get,
                  "in_memory_after": in_memory_after}))
"""


def export(rev: str, into: str) -> str:
    """``git archive rev`` unpacked into ``into``; returns the tree's path."""
    tree = os.path.join(into, "tree")
    os.makedirs(tree)
    archive = subprocess.run(
        ["git", "-C", ROOT, "archive", rev, "journaled"], check=True, capture_output=True
    )
    subprocess.run(["tar", "-x", "-C", tree], input=archive.stdout, check=True)
    return tree


def run_once(tree: str, items: int, max_memory: int, batch: int, where: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", RUNNER, tree, str(items), str(max_memory), str(batch), where],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--items", type=int, default=2_000_000, help="empty items to put (default 2,000,000)")
    p.add_argument(
        "--max-memory", type=int, default=1024 * 1024, help="the reader's max_memory (default 1 MiB)"
    )
    p.add_argument("--batch", type=int, default=1000, help="items per put_many (default 1000)")
    p.add_argument("--base", default=None, help="also measure this git revision")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    where = "/dev/shm" if os.path.isdir("/dev/shm") else ""
    tmp = tempfile.mkdtemp(prefix="bench-memory-")
    try:
        trees = {"working tree": ROOT}
        if args.base:
            trees[args.base] = export(args.base, os.path.join(tmp, "base"))
        results = {
            name: run_once(tree, args.items, args.max_memory, args.batch, where)
            for name, tree in trees.items()
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps({"items": args.items, "max_memory": args.max_memory, "results": results}, indent=2))
        return 0
    print(f"{args.items:,} empty items, one reader, max_memory={args.max_memory:,}, sync='never', tmpfs")
    print(f"{'tree':<14}{'RSS growth MB':>14}{'in memory':>11}{'first get s':>13}{'in memory after':>17}")
    for name, r in results.items():
        print(
            f"{name:<14}{r['rss_growth_mb']:>14.1f}{r['in_memory']:>11,}{r['first_get_s']:>13.3f}"
            f"{r['in_memory_after']:>17,}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
