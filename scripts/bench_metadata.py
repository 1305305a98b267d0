#!/usr/bin/env python3
"""What an item's metadata costs: bytes on disk per field, and single-put rates with and without it.

Part one writes ``--items`` items of each kind into a fresh queue and reads the journal's growth
per item, next to the formula of docs/format.md (a PUT is 33 + payload bytes; a PUTX 65 + key +
headers (5 + name + value each) + payload).  Kinds: a plain put, one header, one key, a
not-before, all three.

Part two measures ``q.put(100 B)`` against ``q.put(100 B, headers={"ct": b"json"})``,
``q.put(100 B, key=...)`` (a distinct 16-byte key per put, no dedup window) and
``q.put_many([100 B], producer=(id, sequence))`` (what the owner does for every client's put:
tagged with the client's next sequence) in one process, on one queue each with one reader,
interleaved round by round (best of ``--rounds`` rounds of ``--ops`` puts) so that the shared
machine's drift hits every kind alike.  ``sync="never"``: the figure is the put path's own
cost, not the disk's.

    python scripts/bench_metadata.py
    python scripts/bench_metadata.py --ops 50000 --rounds 7 --dir /fast/tmp

Figures go to stdout; nothing is asserted.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from journaled import JournaledQueue, QueueConfig  # noqa: E402
from journaled.format import speedups  # noqa: E402

PAYLOAD = b"x" * 100
LATER = time.time() + 365 * 86400  # a not-before a year away: stored, never due here

KINDS: dict[str, dict[str, object]] = {
    "plain": {},
    "headers={'ct': b'json'}": {"headers": {"ct": b"json"}},
    "key (16 B)": {"key": b"k" * 16},
    "not_before": {"not_before": LATER},
    "key + header + not_before": {"key": b"k" * 16, "headers": {"ct": b"json"}, "not_before": LATER},
}


def formula(kw: dict[str, object]) -> int:
    if not kw:
        return 33 + len(PAYLOAD)
    key = kw.get("key", b"")
    headers = kw.get("headers", {})
    assert isinstance(key, bytes) and isinstance(headers, dict)
    return 65 + len(key) + sum(5 + len(n.encode()) + len(v) for n, v in headers.items()) + len(PAYLOAD)


def journal_bytes(path: str) -> int:
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(path, "q.[0-9]*")))


def bytes_per_item(root: str, items: int) -> None:
    print(f"bytes on disk per item ({len(PAYLOAD)} B payload, {items} items each):")
    for name, kw in KINDS.items():
        path = os.path.join(root, "size-" + str(len(os.listdir(root))))
        with JournaledQueue(path, QueueConfig(sync="never"), name="q") as q:
            q.put(b"")  # the header and a first record, so the growth is the items' alone
            before = journal_bytes(path)
            for _ in range(items):
                q.put(PAYLOAD, **kw)  # type: ignore[arg-type]
            q.sync()
            per = (journal_bytes(path) - before) / items
        print(f"  {name:<28} {per:8.1f} B   (format.md: {formula(kw)} B)")


def put_rates(root: str, ops: int, rounds: int) -> None:
    kinds = ["plain", "headers", "key", "tagged"]
    queues = {
        k: JournaledQueue(os.path.join(root, "rate-" + k), QueueConfig(sync="never"), name="q") for k in kinds
    }
    for q in queues.values():
        q.reader("r")  # readers get every item put: a queue in use has one
    best = dict.fromkeys(kinds, 0.0)
    serial = 0
    try:
        for _ in range(rounds):
            for kind in kinds:
                q = queues[kind]
                put = q.put
                if kind == "plain":
                    t = time.perf_counter()
                    for _ in range(ops):
                        put(PAYLOAD)
                elif kind == "tagged":
                    put_many = q.put_many
                    t = time.perf_counter()
                    for sequence in range(serial, serial + ops):
                        put_many([PAYLOAD], producer=(1, sequence))
                    serial += ops
                elif kind == "headers":
                    hdrs = {"ct": b"json"}
                    t = time.perf_counter()
                    for _ in range(ops):
                        put(PAYLOAD, headers=hdrs)
                else:
                    keys = [b"%016d" % (serial + i) for i in range(ops)]
                    serial += ops
                    t = time.perf_counter()
                    for k in keys:
                        put(PAYLOAD, key=k)
                best[kind] = max(best[kind], ops / (time.perf_counter() - t))
    finally:
        for q in queues.values():
            q.close()
    print(f"single puts of {len(PAYLOAD)} B, sync='never' (best of {rounds} rounds of {ops}):")
    for kind in kinds:
        label = {
            "plain": "q.put(data)",
            "headers": "q.put(data, headers={'ct': b'json'})",
            "key": "q.put(data, key=<16 B>)",
            "tagged": "q.put_many([data], producer=(1, seq))",
        }[kind]
        print(
            f"  {label:<40} {best[kind]:>10,.0f} puts/s  {1e6 / best[kind]:6.2f} µs"
            f"   {best[kind] / best['plain']:5.2f}x plain"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=1000, help="items of each kind for the bytes per item")
    ap.add_argument("--ops", type=int, default=20000, help="puts per round and kind")
    ap.add_argument("--rounds", type=int, default=5, help="rounds (the best one counts)")
    ap.add_argument("--dir", default=None, help="where to make the queues (default: a temporary folder)")
    args = ap.parse_args(argv)
    root = tempfile.mkdtemp(prefix="bench-metadata-", dir=args.dir)
    try:
        print(f"hot path: {speedups.describe()}")
        bytes_per_item(root, args.items)
        put_rates(root, args.ops, args.rounds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
