"""``journaled qtest``: load tests that also validate what they measure.

Every payload carries (producer, sequence, hash) so the drain at the end can check that each
item was delivered exactly once per reader, in per-producer order, with intact bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import struct
import sys
import tempfile
import threading
import time
from typing import Any

from journaled.config import QueueConfig
from journaled.errors import Empty
from journaled.queue import JournaledQueue

_TAG = struct.Struct("<IQ8s")  # producer, sequence, blake2b-8 of the rest


def make_payload(producer: int, seq: int, size: int) -> bytes:
    body = (b"%d:%d:" % (producer, seq)) * (max(0, size - _TAG.size) // 8 + 1)
    body = body[: max(0, size - _TAG.size)]
    digest = hashlib.blake2b(body, digest_size=8).digest()
    return _TAG.pack(producer, seq, digest) + body


def check_payload(data: bytes) -> tuple[int, int]:
    """(producer, seq) of a payload made by :func:`make_payload`; ValueError if damaged."""
    producer, seq, digest = _TAG.unpack_from(data)
    if hashlib.blake2b(data[_TAG.size :], digest_size=8).digest() != digest:
        raise ValueError("payload hash mismatch")
    return producer, seq


def parse_sync(text: str) -> Any:
    return text if text in ("always", "never") else float(text)


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return 0.0
    k = min(len(sorted_values) - 1, int(round(p / 100 * (len(sorted_values) - 1))))
    return sorted_values[k]


def run_put(args: argparse.Namespace) -> dict[str, Any]:
    """N threads put as fast as they can; then one reader drains and validates everything."""
    directory = args.dir or tempfile.mkdtemp(prefix="qtest-")
    config = QueueConfig(sync=parse_sync(args.sync))
    per_thread = args.items // args.threads
    latencies: list[list[float]] = [[] for _ in range(args.threads)]
    try:
        with JournaledQueue(directory, config) as q:
            reader = q.reader("qtest")

            def producer(p: int) -> None:
                lat = latencies[p]
                clock = time.perf_counter
                for s in range(per_thread):
                    payload = make_payload(p, s, args.size)
                    t0 = clock()
                    q.put(payload)
                    lat.append(clock() - t0)

            t0 = time.perf_counter()
            threads = [threading.Thread(target=producer, args=(p,)) for p in range(args.threads)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            q.sync()
            elapsed = time.perf_counter() - t0
            # validate: exactly once, per-producer order, intact payloads
            last = [-1] * args.threads
            errors = 0
            seen = 0
            while True:
                try:
                    item = reader.get(block=False)
                except Empty:
                    break
                try:
                    p, s = check_payload(item.data)
                    if s != last[p] + 1:
                        errors += 1
                    last[p] = s
                except ValueError:
                    errors += 1
                reader.commit(item)
                seen += 1
            total = per_thread * args.threads
            errors += abs(total - seen)
            fsyncs = q.fsync_count
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(directory, ignore_errors=True)
    lat = sorted(x for xs in latencies for x in xs)
    return {
        "test": "put",
        "threads": args.threads,
        "items": total,
        "size": args.size,
        "sync": args.sync,
        "seconds": round(elapsed, 3),
        "items_per_s": round(total / elapsed),
        "mb_per_s": round(total * args.size / elapsed / 1e6, 1),
        "latency_us": {
            "p50": round(percentile(lat, 50) * 1e6, 1),
            "p99": round(percentile(lat, 99) * 1e6, 1),
            "p99.9": round(percentile(lat, 99.9) * 1e6, 1),
        },
        "fsyncs": fsyncs,
        "validation_errors": errors,
        "ok": errors == 0,
        "dir": directory if (args.keep or args.dir) else None,
    }


def cmd_qtest(args: argparse.Namespace) -> int:
    result = run_put(args)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"qtest {result['test']}: {result['items']} items x {result['size']} B, "
            f"{result['threads']} threads, sync={result['sync']}\n"
            f"  {result['items_per_s']:,} items/s  {result['mb_per_s']} MB/s  "
            f"latency p50={result['latency_us']['p50']}us p99={result['latency_us']['p99']}us "
            f"p99.9={result['latency_us']['p99.9']}us  fsyncs={result['fsyncs']}\n"
            f"  validation: {'OK' if result['ok'] else 'FAILED'} ({result['validation_errors']} errors)"
        )
    return 0 if result["ok"] else 1


def add_qtest_command(sub: Any) -> None:
    p = sub.add_parser("qtest", help="load-test a queue and validate every delivery")
    p.add_argument("test", nargs="?", default="put", choices=["put"], help="which load test")
    p.add_argument("--threads", type=int, default=4, help="producer threads (default 4)")
    p.add_argument("--items", type=int, default=200_000, help="items in total (default 200000)")
    p.add_argument("--size", type=int, default=1024, help="payload bytes (default 1024)")
    p.add_argument("--sync", default="0.05", help="always | never | SECONDS (default 0.05)")
    p.add_argument("--dir", default=None, help="queue directory (default: a fresh temporary one)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_qtest)


if __name__ == "__main__":  # scripts/qtest delegates here
    parser = argparse.ArgumentParser(prog="qtest")
    add_qtest_command(parser.add_subparsers(dest="command"))
    ns = parser.parse_args(["qtest", *sys.argv[1:]])
    raise SystemExit(cmd_qtest(ns))
