#!/usr/bin/env python3
"""The speed targets of issue 14, each printed as a ratio measured in one run.

    python scripts/bench_targets.py [--tree PATH] [--quick] [--json]

Measures, in this one interpreter (so with the hot path ``journaled.format.speedups`` selects here:
set ``JOURNALED_PURE_PYTHON=1`` for the pure-Python one), with the peers and baselines of
scripts/bench_peers.py, alternating the two sides of each ratio and keeping the best of
``--repeat`` rounds per side:

* single ``put`` and single ``get``+``commit``, 100 B and 1 KiB, default sync, one reader
  attached, against queuelib ``FifoDiskQueue`` push/pop (target >= 1.0);
* ``put_many`` of 100 B items (batches of 1000) with one reader attached (target >= 1,000,000/s);
* one producer + one consumer thread, 1 KiB, with commit (target >= 166 MB/s, BigQueue's figure);
* ``sync="always"``: 8 producer threads against one (target >= 5x), and one thread against a raw
  ``os.write`` + ``fdatasync`` loop (target >= 0.9).

``--tree`` measures another checkout's ``journaled`` package (e.g. main, exported with
``git archive``) with this script's peers.  The Spark and backlog targets have their own
scripts (bench_spark.py, bench_backlog.py).  Needs queuelib (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def best(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    return max(fn() for _ in range(repeat))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", default=os.path.dirname(HERE), help="checkout whose journaled/ is measured")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="smaller caps (noisier)")
    ap.add_argument("--dir", default=None, help="where queues are created (default: system temp dir)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.abspath(args.tree))
    import journaled  # the tree's, before bench_peers puts this checkout on the path

    sys.path.insert(1, HERE)
    import bench_peers as bp

    if os.path.exists(os.path.join(os.path.dirname(journaled.__file__), "format/speedups.py")):
        from journaled.format import speedups

        hot = speedups.describe()
    else:
        hot = "pure Python (this tree has no compiled hot path)"
    cap, items = (0.7, 60_000) if args.quick else (1.5, 150_000)
    root = tempfile.mkdtemp(prefix="bench-targets-", dir=args.dir)
    rows: list[dict[str, object]] = []

    def row(name: str, value: float, unit: str, target: float, detail: str) -> None:
        rows.append(
            {
                "target": name,
                "value": value,
                "unit": unit,
                "goal": target,
                "met": value >= target,
                "detail": detail,
            }
        )
        print(
            f"{name:<44} {value:>10.3f} {unit:<8} (goal >= {target:g}) "
            f"{'met' if value >= target else 'NOT met'}"
            f"   {detail}",
            flush=True,
        )

    print(f"# {journaled.__file__}: hot path {hot}; machine {bp.machine()}", flush=True)
    try:
        for size in (100, 1024):
            mine = {"put": 0.0, "get": 0.0}
            peer = {"put": 0.0, "get": 0.0}
            for _ in range(args.repeat):
                j = bp.measure(lambda p: bp.Journaled(p, 0.05), size, items, 256 << 20, cap, root)
                q = bp.measure(bp.Queuelib, size, items, 256 << 20, cap, root)
                for ph in ("put", "get"):
                    mine[ph] = max(mine[ph], j[f"{ph}_per_s"])
                    peer[ph] = max(peer[ph], q[f"{ph}_per_s"])
            for ph, label in (("put", "put"), ("get", "get+commit")):
                row(
                    f"{label} {size} B / queuelib",
                    mine[ph] / peer[ph],
                    "x",
                    1.0,
                    f"{mine[ph]:,.0f}/s vs {peer[ph]:,.0f}/s",
                )
        many = best(
            lambda: bp.measure(
                lambda p: bp.Journaled(p, 0.05, batch=1000), 100, 1_000_000, 256 << 20, cap, root
            )["put_per_s"],
            args.repeat,
        )
        row("put_many 100 B, 1 reader (items/s)", many, "items/s", 1_000_000, "")
        spsc = best(lambda: bp.measure_spsc("journaled", 1024, items, root)["mb_s"], args.repeat)
        row("1 producer + 1 consumer, 1 KiB (MB/s)", spsc, "MB/s", 166, "BigQueue's published 166 MB/s")
        one = best(lambda: bp.measure_group_commit(1, 1024, cap, root)["per_s"], args.repeat)
        eight = best(lambda: bp.measure_group_commit(8, 1024, cap, root)["per_s"], args.repeat)
        row('sync="always": 8 threads / 1 thread', eight / one, "x", 5.0, f"{eight:,.0f}/s vs {one:,.0f}/s")
        raw = best(
            lambda: bp.measure(lambda p: bp.RawWrite(p, True), 1024, items, 256 << 20, cap, root)[
                "put_per_s"
            ],
            args.repeat,
        )
        row('sync="always": 1 thread / write+fdatasync', one / raw, "x", 0.9, f"{one:,.0f}/s vs {raw:,.0f}/s")
    finally:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(
            json.dumps(
                {
                    "hot_path": hot,
                    "machine": bp.machine(),
                    "rows": rows,
                    "when": time.strftime("%Y-%m-%d %H:%M:%S"),
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
