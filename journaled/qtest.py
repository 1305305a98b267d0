"""``journaled qtest``: load tests that also validate what they measure.

Five tests in the libkestrel ``qtest`` tradition (``put``, ``flood``, ``timeout``, ``fanout``,
``leaky-reader``), run on the self-checking machinery of qtest_run.py.  A failed check makes the
command exit with status 1.

Throughput figures include making and checking payloads (a few microseconds per item); they
measure the queue as an application sees it, not the bare library: see scripts/bench_peers.py.
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from journaled import speedups
from journaled.config import MiB
from journaled.queue import JournaledQueue
from journaled.qtest_run import TESTS, Run, join_all, parse_size, parse_sync, percentile, start_thread
def test_put(run: Run, q: JournaledQueue) -> dict[str, Any]:
    """N threads put as fast as they can; then one reader drains and validates everything."""
    args = run.args
    reader = q.reader("qtest", run.reader_config)
    per = max(1, args.items // args.writers)
    with run.progress(per * args.writers):
        t0 = time.perf_counter()
        threads = [start_thread(run.produce, q, p, per) for p in range(args.writers)]
        if args.seconds:
            timer = threading.Timer(args.seconds, run.stop_producing.set)
            timer.start()
        join_all(threads)
        q.sync()
        put_s = time.perf_counter() - t0
        if args.seconds:
            timer.cancel()
    t1 = time.perf_counter()
    got = run.drain(reader)
    return {"put_seconds": put_s, "get_seconds": time.perf_counter() - t1, "gets": got}


def _writers_against_readers(
    run: Run, q: JournaledQueue, timeout: float | None = None, pause: float | None = None
) -> dict[str, Any]:
    """W writers and R consumers of one shared reader run for ``--seconds``; then drain."""
    args = run.args
    reader = q.reader("qtest", run.reader_config)
    t0 = time.perf_counter()
    consume_kw: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
    produce_extra = () if pause is None else (pause,)
    with run.progress(None):
        consumers = [start_thread(run.consume, reader, seed=r, **consume_kw) for r in range(args.readers)]
        producers = [start_thread(run.produce, q, p, None, *produce_extra) for p in range(args.writers)]
        time.sleep(args.seconds)
        run.stop_producing.set()
        join_all(producers)
        put_s = time.perf_counter() - t0
        run.producers_done.set()
        join_all(consumers)
    run.drain(reader)
    return {"put_seconds": put_s, "get_seconds": time.perf_counter() - t0, "gets": run.ledger.delivered()}


def test_flood(run: Run, q: JournaledQueue) -> dict[str, Any]:
    """W writers and R readers (get + commit on one shared reader) at once for T seconds."""
    return _writers_against_readers(run, q)


def test_timeout(run: Run, q: JournaledQueue) -> dict[str, Any]:
    """Slow writers and a stampede of readers with short timeouts: nothing lost, nothing twice."""
    return _writers_against_readers(run, q, timeout=run.args.get_timeout, pause=run.args.pause)


def test_fanout(run: Run, q: JournaledQueue) -> dict[str, Any]:
    """One writer, K named readers each draining everything, concurrently."""
    args = run.args
    readers = [q.reader(f"fan{k}", run.reader_config) for k in range(args.readers)]
    t0 = time.perf_counter()
    with run.progress(args.items):
        consumers = [start_thread(run.consume, r, seed=k) for k, r in enumerate(readers)]
        if args.seconds:
            timer = threading.Timer(args.seconds, run.stop_producing.set)
            timer.start()
        run.produce(q, 0, args.items)
        if args.seconds:
            timer.cancel()
        put_s = time.perf_counter() - t0
        run.producers_done.set()
        join_all(consumers)
    for r in readers:
        run.drain(r)
    return {"put_seconds": put_s, "get_seconds": time.perf_counter() - t0, "gets": run.ledger.delivered()}


def test_leaky_reader(run: Run, q: JournaledQueue) -> dict[str, Any]:
    """Consumers abort a fraction of reads and some die holding open reads; the queue is then
    closed and reopened (what a restart after a consumer crash does) and the rest drained:
    every item must end up committed exactly once."""
    args = run.args
    reader = q.reader("qtest", run.reader_config)
    t0 = time.perf_counter()
    with run.progress(None):
        consumers = [
            start_thread(run.consume, reader, abort_rate=args.abort_rate, seed=r) for r in range(args.readers)
        ]
        dying = [
            start_thread(run.consume, reader, die_after=1 + k % 5, seed=1000 + k) for k in range(args.dying)
        ]
        producers = [start_thread(run.produce, q, p, None) for p in range(args.writers)]
        time.sleep(args.seconds)
        run.stop_producing.set()
        join_all(producers)
        put_s = time.perf_counter() - t0
        run.producers_done.set()
        join_all(consumers + dying)
    left_open = reader.stats().open_reads
    run.drain(reader)  # aborts that came back after the consumers left
    q.close()
    with run.open() as q2:  # the open reads of the dead consumers come back
        replayed = run.drain(q2.reader("qtest"))
    return {
        "put_seconds": put_s,
        "get_seconds": time.perf_counter() - t0,
        "gets": run.ledger.delivered(),
        "open_at_close": left_open,
        "replayed_after_reopen": replayed,
    }


RUNNERS: dict[str, Callable[[Run, JournaledQueue], dict[str, Any]]] = {
    "put": test_put,
    "flood": test_flood,
    "timeout": test_timeout,
    "fanout": test_fanout,
    "leaky-reader": test_leaky_reader,
}


def run_qtest(args: argparse.Namespace) -> dict[str, Any]:
    """Run the chosen test and return its result (a JSON-ready dict with ``ok``)."""
    run = Run(args)
    try:
        q = run.open()
        try:
            extra = RUNNERS[args.test](run, q)
            fsyncs = q.fsync_count
        finally:
            q.close()
        ledger = run.ledger
        # The dying consumers of leaky-reader legitimately leave their reads uncommitted until
        # the reopen; every other test must show strict per-thread order too.
        errors = ledger.validate(ordered_logs=args.test != "leaky-reader")
        if args.test == "leaky-reader" and extra["open_at_close"] > extra["replayed_after_reopen"]:
            errors.append(
                f"{extra['open_at_close']} reads were open at close but only "
                f"{extra['replayed_after_reopen']} came back after reopening"
            )
    finally:
        run.cleanup()
    put_items = sum(ledger.produced.values())
    put_s = max(extra.pop("put_seconds"), 1e-9)
    get_s = max(extra.pop("get_seconds"), 1e-9)
    lat = sorted(x for xs in ledger.latencies for x in xs)
    lo, hi = args.size
    result: dict[str, Any] = {
        "test": args.test,
        "writers": args.writers,
        "readers": 1 if args.test == "put" else args.readers,
        "size": lo if lo == hi else f"{lo}-{hi}",
        "batch": args.batch,
        "sync": args.sync,
        "put": {
            "items": put_items,
            "bytes": ledger.put_bytes,
            "seconds": round(put_s, 3),
            "items_per_s": round(put_items / put_s),
            "mb_per_s": round(ledger.put_bytes / put_s / 1e6, 1),
            "latency_us": {
                "p50": round(percentile(lat, 50) * 1e6, 1),
                "p99": round(percentile(lat, 99) * 1e6, 1),
                "p99.9": round(percentile(lat, 99.9) * 1e6, 1),
                "max": round((lat[-1] if lat else 0.0) * 1e6, 1),
            },
        },
        "get": {
            "items": extra.pop("gets"),
            "seconds": round(get_s, 3),
            "items_per_s": round(ledger.delivered() / get_s),
            "aborts": ledger.aborts,
            "timeouts": ledger.timeouts,
        },
        "fsyncs": fsyncs,
        **extra,
        "validation_errors": errors,
        "ok": not errors,
        "dir": run.directory if (args.keep or args.dir) else None,
    }
    return result


def format_summary(r: dict[str, Any]) -> str:
    """The one-screen, human summary of a result."""
    put, get, lat = r["put"], r["get"], r["put"]["latency_us"]
    who = f"{r['writers']} writer(s), {r['readers']} reader(s)"
    if r["test"] == "fanout":
        who = f"1 writer, {r['readers']} fan-out readers"
    batch = f", put_many x{r['batch']}" if r["batch"] > 1 else ""
    lines = [
        f"qtest {r['test']}: {who}, items {r['size']} B{batch}, sync={r['sync']}, hot path {speedups.implementation}",
        f"  put   {put['items']:>10,} items in {put['seconds']:.2f} s  {put['items_per_s']:>9,} items/s"
        f"  {put['mb_per_s']:>7} MB/s",
        f"        latency per put call: p50 {lat['p50']} us  p99 {lat['p99']} us  "
        f"p99.9 {lat['p99.9']} us  max {lat['max']} us",
        f"  got   {get['items']:>10,} deliveries in {get['seconds']:.2f} s  {get['items_per_s']:>9,} items/s"
        f"  (aborts {get['aborts']:,}, empty timeouts {get['timeouts']:,})",
        f"  fsync rounds {r['fsyncs']:,}",
    ]
    if "replayed_after_reopen" in r:
        lines.append(
            f"  dead consumers left {r['open_at_close']} open reads; {r['replayed_after_reopen']} "
            "items redelivered after reopen"
        )
    if r["ok"]:
        lines.append("  validation: OK (exactly once per reader, per-producer order, payload hashes)")
    else:
        lines.append(f"  validation: FAILED ({len(r['validation_errors'])} problems)")
        lines.extend(f"    - {e}" for e in r["validation_errors"][:10])
    if r["dir"]:
        lines.append(f"  queue directory kept: {r['dir']}")
    return "\n".join(lines)


def cmd_qtest(args: argparse.Namespace) -> int:
    """Run a qtest from parsed arguments; print the summary or JSON; 0 if validation passed."""
    _apply_defaults(args)
    result = run_qtest(args)
    print(json.dumps(result) if args.json else format_summary(result))
    return 0 if result["ok"] else 1


# Defaults differ per test so each finishes in about 10 s on a small machine.
_DEFAULTS: dict[str, dict[str, Any]] = {
    "put": {"writers": 4, "readers": 1, "items": 200_000, "seconds": 0.0},
    "flood": {"writers": 2, "readers": 2, "items": 0, "seconds": 5.0},
    "timeout": {"writers": 2, "readers": 16, "items": 0, "seconds": 5.0},
    "fanout": {"writers": 1, "readers": 4, "items": 50_000, "seconds": 0.0},
    "leaky-reader": {"writers": 2, "readers": 4, "items": 0, "seconds": 5.0},
}


def _apply_defaults(args: argparse.Namespace) -> None:
    for key, value in _DEFAULTS[args.test].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.test == "fanout":
        args.writers = 1
    for key in ("writers", "readers", "items"):
        if getattr(args, key) < (0 if key == "items" else 1):
            raise SystemExit(f"qtest: --{key} must be positive")


EPILOG = """tests:
  put           N threads put as fast as they can, then one reader drains and validates
  flood         W writers and R consumer threads (get + commit) at once for --seconds
  timeout       slow writers (--pause) and a stampede of readers with short --get-timeout
  fanout        one writer, K named readers each draining everything
  leaky-reader  consumers abort --abort-rate of reads, --dying consumers die holding reads;
                the queue is reopened and everything must be committed exactly once

Exit status 1 when validation fails.  Examples:
  journaled qtest                                  # put, 4 threads, 200k x 1 KiB, sync 50 ms
  journaled qtest flood --writers 4 --readers 4 --size 100-4096 --seconds 10
  journaled qtest put --sync always --threads 8 --items 20000 --json
"""


def add_qtest_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("test", nargs="?", default="put", choices=TESTS, help="which load test (default put)")
    p.add_argument("--threads", "--writers", dest="writers", type=int, default=None,
                   help="producer threads (put 4, others 2; fanout always 1)")
    p.add_argument("--readers", type=int, default=None,
                   help="consumer threads; for fanout, named readers (flood 2, timeout 16, fanout 4)")
    p.add_argument("--items", type=int, default=None,
                   help="items to put in total for put/fanout (200000 / 50000)")
    p.add_argument("--seconds", type=float, default=None,
                   help="how long writers run (flood/timeout/leaky-reader: 5); for put/fanout a cap")
    p.add_argument("--size", type=parse_size, default=(1024, 1024),
                   help="payload bytes, N or MIN-MAX (uniform); at least 20 (default 1024)")
    p.add_argument("--batch", type=int, default=1, help="items per put_many call (default 1: put)")
    p.add_argument("--sync", type=parse_sync, default=0.05,
                   help="always | never | SECONDS of periodic fsync (default 0.05)")
    p.add_argument("--journal-size", type=float, default=16.0, help="MiB per journal file (default 16)")
    p.add_argument("--reader-memory", type=float, default=16.0,
                   help="MiB of items a reader keeps in memory before reading back from disk (16)")
    p.add_argument("--pause", type=float, default=0.001, help="timeout: writer sleep per put (0.001)")
    p.add_argument("--get-timeout", type=float, default=0.005, help="timeout: get timeout (0.005)")
    p.add_argument("--abort-rate", type=float, default=0.1, help="leaky-reader: fraction aborted (0.1)")
    p.add_argument("--dying", type=int, default=2, help="leaky-reader: consumers that die (2)")
    p.add_argument("--seed", type=int, default=1, help="random seed for sizes and bodies")
    p.add_argument("--dir", default=None, help="queue directory (default: a fresh temporary one, removed)")
    p.add_argument("--keep", action="store_true", help="keep the temporary queue directory")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the summary")
    p.add_argument("--no-progress", action="store_true", help="no progress bar even on a terminal")


def add_qtest_command(sub: Any) -> None:
    """Register ``qtest`` on the ``journaled`` command's subparsers."""
    p = sub.add_parser(
        "qtest",
        help="load-test a queue and validate every delivery",
        description="Load-test a journaled queue and validate every delivery.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_qtest_arguments(p)
    p.set_defaults(func=cmd_qtest)


def main(argv: Sequence[str] | None = None) -> int:
    """``scripts/qtest`` and ``python -m journaled.qtest``: the same as ``journaled qtest``."""
    parser = argparse.ArgumentParser(
        prog="qtest",
        description="Load-test a journaled queue and validate every delivery.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_qtest_arguments(parser)
    return cmd_qtest(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
