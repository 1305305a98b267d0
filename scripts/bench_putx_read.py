#!/usr/bin/env python3
"""Read-back speed of items put by a client process (PUTX records carrying only a producer's tag),
and of items carrying a 16-byte key and one header, against plain puts: ``--items`` items of
``--size`` bytes drained after a reopen.

Each kind gets a fresh queue: ``put_many`` in batches of 1,000, plain (type 0x01 PUT records) or
with ``producer=(id, first_sequence)`` (type 0x02 PUTX records with nothing but the tag, what
every client put writes), then closed.  The queue is reopened and a reader starting at the
earliest item drains it with ``get_many(1000)`` + ``commit_many``, so every item is read back from
disk through the record walker and read-behind.  The figure is items per second of that drain
(best of ``--rounds``, the kinds interleaved round by round so that the shared machine's drift
hits both alike), and the tagged/plain ratio.

``--before REV`` also runs the same measurement on the tree of git revision REV (exported to a
temporary folder, its extension built there), in a subprocess, in the same run: the figures
before and after a change, side by side.

    python scripts/bench_putx_read.py
    python scripts/bench_putx_read.py --before HEAD~1 --items 100000 --rounds 3

Figures go to stdout; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BATCH = 1000


def drain_rate(root: str, kind: str, items: int, size: int) -> float:
    """Put ``items`` items of ``kind`` into a fresh queue, reopen it, drain it: items/s."""
    from journaled import JournaledQueue, QueueConfig, ReaderConfig

    path = tempfile.mkdtemp(prefix=kind + "-", dir=root)
    payload = b"x" * size
    try:
        with JournaledQueue(path, QueueConfig(sync="never"), name="q") as q:
            for first in range(0, items, BATCH):
                batch = [payload] * min(BATCH, items - first)
                if kind == "tagged":
                    q.put_many(batch, producer=(4242, first + 1))
                elif kind == "keyed":
                    keys = [b"%016d" % i for i in range(first, first + len(batch))]
                    q.put_many(batch, keys=keys, headers={"ct": b"json"})
                else:
                    q.put_many(batch)
        with JournaledQueue(path, QueueConfig(sync="never"), name="q") as q:
            reader = q.reader("drain", ReaderConfig(start="earliest"))
            taken = 0
            t = time.perf_counter()
            while taken < items:
                got = reader.get_many(BATCH, timeout=5)
                reader.commit_many(got)
                taken += len(got)
            return items / (time.perf_counter() - t)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def measure(root: str, items: int, size: int, rounds: int) -> dict[str, object]:
    from journaled.format import speedups

    best = {"plain": 0.0, "tagged": 0.0, "keyed": 0.0}
    for _ in range(rounds):
        for kind in best:
            best[kind] = max(best[kind], drain_rate(root, kind, items, size))
    return {"hot_path": speedups.describe(), **best}


def tree_of(rev: str, work: str) -> str:
    """The files of git revision ``rev`` in ``work``, with their extension built in place."""
    tree = os.path.join(work, "tree")
    os.makedirs(tree)
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tree,
        check=True,
        capture_output=True,
    )
    return tree


def run_in(tree: str, args: argparse.Namespace, root: str) -> dict[str, object]:
    cmd = [sys.executable, os.path.abspath(__file__), "--json", "--dir", root]
    cmd += ["--items", str(args.items), "--size", str(args.size), "--rounds", str(args.rounds)]
    env = {**os.environ, "PYTHONPATH": tree}
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, cwd=tree).stdout
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


def show(label: str, res: dict[str, object]) -> None:
    plain, tagged = float(res["plain"]), float(res["tagged"])  # type: ignore[arg-type]
    print(f"{label}: {res['hot_path']}")
    print(f"  plain PUT items     {plain:>10,.0f} items/s")
    print(f"  tagged PUTX items   {tagged:>10,.0f} items/s   {tagged / plain:5.2f}x plain")
    if "keyed" in res:
        keyed = float(res["keyed"])  # type: ignore[arg-type]
        print(f"  keyed PUTX items    {keyed:>10,.0f} items/s   {keyed / plain:5.2f}x plain (key + header)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=100_000, help="items per queue (default 100,000)")
    ap.add_argument("--size", type=int, default=1024, help="payload bytes per item (default 1024)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds; the best one counts (default 3)")
    ap.add_argument("--before", metavar="REV", default=None, help="also measure git revision REV's tree")
    ap.add_argument("--dir", default=None, help="where to make the queues (default: a temporary folder)")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one line for --before's run
    args = ap.parse_args(argv)
    root = tempfile.mkdtemp(prefix="bench-putx-read-", dir=args.dir)
    try:
        if args.json:
            print(json.dumps(measure(root, args.items, args.size, args.rounds)))
            return 0
        print(f"{args.items:,} items of {args.size} B, drained after a reopen (best of {args.rounds})")
        after = run_in(os.path.abspath(ROOT), args, root)
        if args.before is not None:
            before = run_in(tree_of(args.before, root), args, root)
            show(f"before ({args.before})", before)
        show("after (this tree)", after)
        if args.before is not None:
            ratio = float(after["tagged"]) / float(before["tagged"])  # type: ignore[arg-type]
            print(f"tagged items: {ratio:.2f}x as fast as before")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
