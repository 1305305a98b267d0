#!/usr/bin/env python3
"""Throughput of this tree against another revision, as ratios measured in one run.

    python scripts/bench_ratio.py --base a4d8194 [--items 200000] [--repeat 5] [--json]

For each case (single ``put`` of 100 B and of 1 KiB items with one reader attached and the
default sync policy, then ``get``+``commit`` of those items from memory) the two trees run
alternately (new, base, new, base, ...), each run in a fresh interpreter on tmpfs when there is
one, so drift on a busy machine hits both sides alike.  Prints the median items/s per side and
new/base.  The base tree is exported with ``git archive`` into a temporary directory (the
repository's worktrees are not touched) and its compiled hot path built there, so both sides run
the same kind of implementation (each side's is printed; ``JOURNALED_PURE_PYTHON=1`` makes both
pure Python).
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RUNNER = r"""
import sys, time, tempfile, shutil, json
sys.path.insert(0, sys.argv[1])
from journaled import JournaledQueue
items, size, where = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] or None
d = tempfile.mkdtemp(dir=where)
try:
    q = JournaledQueue(d)
    r = q.reader("r")
    data = b"x" * size
    put = q.put
    t0 = time.perf_counter()
    for _ in range(items):
        put(data)
    t1 = time.perf_counter()
    get, commit = r.get, r.commit
    for _ in range(items):
        commit(get(block=False))
    t2 = time.perf_counter()
    q.close()
finally:
    shutil.rmtree(d, ignore_errors=True)
try:
    from journaled.format import speedups
except ImportError:  # a revision from before the package had folders
    from journaled import speedups
impl = speedups.implementation
print(json.dumps({"put": items / (t1 - t0), "get+commit": items / (t2 - t1), "impl": impl}))
"""


def export(rev: str, into: str) -> str:
    """``git archive rev`` unpacked into ``into``, its C extension built in place (where a
    compiler exists: setup.py turns a failed build into a notice); returns the tree's path."""
    tree = os.path.join(into, "tree")
    os.makedirs(tree)
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", tree], input=archive.stdout, check=True)
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tree,
        check=True,
        capture_output=True,
    )
    return tree


def run_once(tree: str, items: int, size: int, where: str) -> dict[str, float | str]:
    out = subprocess.run(
        [sys.executable, "-c", RUNNER, tree, str(items), str(size), where],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="git revision to compare against")
    p.add_argument("--new", default=None, help="git revision to measure instead of the working tree")
    p.add_argument("--items", type=int, default=200_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--sizes", default="100,1024", help="payload sizes in bytes (comma-separated)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    where = "/dev/shm" if os.path.isdir("/dev/shm") else ""
    tmp = tempfile.mkdtemp(prefix="bench-ratio-")
    try:
        base = export(args.base, os.path.join(tmp, "base"))
        new = export(args.new, os.path.join(tmp, "new")) if args.new else ROOT
        results = []
        for size in [int(s) for s in args.sizes.split(",")]:
            runs: dict[str, list[dict[str, float | str]]] = {"new": [], "base": []}
            for _ in range(args.repeat):
                runs["new"].append(run_once(new, args.items, size, where))
                runs["base"].append(run_once(base, args.items, size, where))
            impl = {side: sorted({str(r["impl"]) for r in rs}) for side, rs in runs.items()}
            for case in ("put", "get+commit"):
                n = statistics.median(float(r[case]) for r in runs["new"])
                b = statistics.median(float(r[case]) for r in runs["base"])
                results.append(
                    {"case": case, "size": size, "new": n, "base": b, "ratio": n / b, "impl": impl}
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(
            json.dumps({"base": args.base, "new": args.new or "working tree", "results": results}, indent=2)
        )
    else:
        print(
            f"new = {args.new or 'working tree'}, base = {args.base}; {args.items} items, median of "
            f"{args.repeat}"
        )
        print(f"hot path: new {results[0]['impl']['new']}, base {results[0]['impl']['base']}")
        print(f"{'case':<12}{'size':>6}{'new items/s':>14}{'base items/s':>14}{'new/base':>10}")
        for r in results:
            print(f"{r['case']:<12}{r['size']:>6}{r['new']:>14,.0f}{r['base']:>14,.0f}{r['ratio']:>10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
