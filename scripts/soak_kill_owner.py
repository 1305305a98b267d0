#!/usr/bin/env python3
"""Exactly-once puts under an owner's death, over many seeded runs (issue 25, point 4).

Runs ``journaled qtest put --processes N --kill-owner --seed S --json`` for seeds ``--first`` ..
``--first + --runs - 1`` (each run kills the owner with SIGKILL after a share of the puts its
seed chooses; the clients take the queue over and make their puts in flight again with the same
producer tag), and prints one line per run and a summary:

    seed  killed after  retried  stored twice  lost  unknown  redelivered  result

``stored twice``: acknowledged puts stored under more than one id (duplicates); ``lost``:
acknowledged puts never delivered; ``unknown``: puts that raised ``OwnerLost`` with
``outcome_unknown``; ``retried``: puts the clients made again on the next owner;
``redelivered``: reads the killed owner had handed out, delivered once more (allowed: at least
once for reads).  Exits 1 if any run failed or had a duplicate, a loss or an unknown outcome.

Run from a checkout: ``PYTHONPATH=$PWD python scripts/soak_kill_owner.py [--runs 20]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one_run(seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """One seeded kill-owner run's JSON result (``ok`` False with ``error`` if it broke)."""
    with tempfile.TemporaryDirectory(prefix="soak-kill-owner-") as tmp:
        argv = [
            sys.executable,
            "-m",
            "journaled",
            "qtest",
            "put",
            "--processes",
            str(args.processes),
            "--writers",
            str(args.writers),
            "--batch",
            str(args.batch),
            "--items",
            str(args.items),
            "--kill-owner",
            "--seed",
            str(seed),
            "--json",
            "--dir",
            os.path.join(tmp, "q"),
        ]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (ROOT, os.environ.get("PYTHONPATH")))))
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=args.timeout, env=env)
        except subprocess.TimeoutExpired:
            return {"ok": False, "error": f"no result within {args.timeout:g} s"}
        try:
            result: dict[str, Any] = json.loads(out.stdout)
        except ValueError:
            return {"ok": False, "error": (out.stderr or out.stdout).strip()[-300:]}
        return result


def row(seed: int, r: dict[str, Any]) -> str:
    if "error" in r:
        return f"{seed:>4}  FAILED: {r['error']}"
    killed = r.get("owner_killed") or {}
    errors = r.get("validation_errors") or []
    verdict = "ok" if r.get("ok") and not errors else "FAILED: " + "; ".join(errors)[:200]
    return (
        f"{seed:>4}  {killed.get('after_puts', '-'):>12}  {r.get('puts_retried', 0):>7}  "
        f"{r.get('stored_twice', 0):>12}  {r.get('lost_acknowledged', 0):>4}  "
        f"{r.get('outcome_unknown', 0):>7}  {r.get('redelivered', 0):>11}  {verdict}"
    )


def bad(r: dict[str, Any]) -> bool:
    return (
        "error" in r
        or not r.get("ok")
        or bool(r.get("validation_errors"))
        or bool(r.get("stored_twice"))
        or bool(r.get("lost_acknowledged"))
        or bool(r.get("outcome_unknown"))
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=20, help="seeded runs (default 20)")
    parser.add_argument("--first", type=int, default=1, help="the first seed (default 1)")
    parser.add_argument("--processes", type=int, default=4, help="client processes (default 4)")
    parser.add_argument("--writers", type=int, default=1, help="producer threads per process (default 1)")
    parser.add_argument("--batch", type=int, default=1, help="items per put; >1: put_many (default 1)")
    parser.add_argument("--items", type=int, default=4000, help="items per run (default 4000)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds one run may take (300)")
    args = parser.parse_args()
    print("seed  killed after  retried  stored twice  lost  unknown  redelivered  result", flush=True)
    results = []
    for seed in range(args.first, args.first + args.runs):
        r = one_run(seed, args)
        results.append(r)
        print(row(seed, r), flush=True)
    failed = sum(map(bad, results))
    total = {k: sum(int(r.get(k) or 0) for r in results) for k in ("stored_twice", "lost_acknowledged")}
    unknown = sum(int(r.get("outcome_unknown") or 0) for r in results)
    retried = sum(int(r.get("puts_retried") or 0) for r in results)
    print(
        f"{len(results)} runs, {failed} failed; stored twice {total['stored_twice']}, lost "
        f"{total['lost_acknowledged']}, outcome unknown {unknown}; puts made again on the next "
        f"owner {retried}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
