"""``journaled qtest``: load tests that also validate what they measure.

Five tests in the libkestrel ``qtest`` tradition (``put``, ``flood``, ``timeout``, ``fanout``,
``leaky-reader``), run on the self-checking machinery of cli/qtest/run.py, and ``crash``
(cli/qtest/crash.py), which kills a real child process over and over.  With no test named, the main
job runs ``put`` and then a short ``crash``.  Exit status: 0 validated, 1 a check failed,
2 usage error (cli/qtest/args.py), 130 interrupted, with a partial summary.

Throughput figures include making and checking payloads (a few microseconds per item); they
measure the queue as an application sees it, not the bare library: see scripts/bench_peers.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from journaled.cli.inspection import UsageError
from journaled.cli.qtest.args import EPILOG, MAIN_JOB, add_qtest_arguments, apply_defaults, sync_words
from journaled.cli.qtest.crash import CrashPlan, format_crash, soak
from journaled.cli.qtest.procs import process_lines, run_processes
from journaled.cli.qtest.run import Run, join_all, percentile
from journaled.format import speedups
from journaled.queue import JournaledQueue


def test_put(run: Run, q: JournaledQueue) -> dict[str, Any]:
    """N threads put as fast as they can; then one reader drains and validates everything."""
    args = run.args
    reader = q.reader("qtest", run.reader_config)
    per = max(1, args.items // args.writers)
    with run.progress(per * args.writers):
        t0 = time.perf_counter()
        threads = [run.start(run.produce, q, p, per) for p in range(args.writers)]
        if args.seconds:
            timer = threading.Timer(args.seconds, run.stop_producing.set)
            timer.start()
        join_all(threads)
        q.sync()
        put_s = time.perf_counter() - t0
        run.disk.sample()  # every item is on disk and none consumed yet: the exact figure
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
        consumers = [run.start(run.consume, reader, seed=r, **consume_kw) for r in range(args.readers)]
        producers = [run.start(run.produce, q, p, None, *produce_extra) for p in range(args.writers)]
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
        consumers = [run.start(run.consume, r, seed=k) for k, r in enumerate(readers)]
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
            run.start(run.consume, reader, abort_rate=args.abort_rate, seed=r) for r in range(args.readers)
        ]
        dying = [
            run.start(run.consume, reader, die_after=1 + k % 5, seed=1000 + k) for k in range(args.dying)
        ]
        producers = [run.start(run.produce, q, p, None) for p in range(args.writers)]
        time.sleep(args.seconds)
        run.stop_producing.set()
        join_all(producers)
        put_s = time.perf_counter() - t0
        run.producers_done.set()
        join_all(consumers + dying)
    left_open = reader.stats().open_reads
    run.drain(reader)  # aborts that came back after the consumers left
    q.close()
    if run.keycheck is not None:  # the reopen gives the dead consumers' reads (and keys) back
        run.keycheck.reopened("qtest")
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


def _run_in_process(run: Run) -> tuple[dict[str, Any], int | None, list[str], bool]:
    """The chosen test on a queue this process owns: (result fields, fsync rounds, validation
    errors, interrupted)."""
    args = run.args
    interrupted = False
    t0 = time.perf_counter()
    q = run.open()
    try:
        try:
            with run.disk:
                extra = RUNNERS[args.test](run, q)
        except KeyboardInterrupt:
            # Ctrl-C: stop every thread, then report what was measured and delivered so far
            interrupted = True
            run.stop()
            took = time.perf_counter() - t0
            extra = {"put_seconds": took, "get_seconds": took, "gets": run.ledger.delivered()}
        fsyncs = q.fsync_count
    finally:
        q.close()
    # The dying consumers of leaky-reader legitimately leave their reads uncommitted until
    # the reopen; every other test must show strict per-thread order too, unless key order
    # lets a consumer pass an item whose key is busy (then key order is what is checked).
    ordered = args.test != "leaky-reader" and run.keycheck is None
    errors = run.ledger.validate(ordered_logs=ordered, complete=not interrupted)
    if run.keycheck is not None:
        errors.extend(run.keycheck.errors())
    if "replayed_after_reopen" in extra and extra["open_at_close"] > extra["replayed_after_reopen"]:
        errors.append(
            f"{extra['open_at_close']} reads were open at close but only "
            f"{extra['replayed_after_reopen']} came back after reopening"
        )
    return extra, fsyncs, errors, interrupted


def run_qtest(args: argparse.Namespace) -> dict[str, Any]:
    """Run the chosen test and return its result (a JSON-ready dict with ``ok``)."""
    run = Run(args)
    processes = getattr(args, "processes", 0) or 0
    try:
        extra, fsyncs, errors, interrupted = (run_processes if processes else _run_in_process)(run)
    finally:
        run.cleanup()
    ledger = run.ledger
    put_items = sum(ledger.produced.values()) - sum(map(len, ledger.unknown.values()))  # acknowledged
    put_s = max(extra.pop("put_seconds"), 1e-9)
    get_s = max(extra.pop("get_seconds"), 1e-9)
    lat = sorted(x for xs in ledger.latencies for x in xs)
    gets = extra.pop("gets")
    lo, hi = args.size
    result: dict[str, Any] = {
        "test": args.test,
        "writers": args.writers * max(1, processes),
        "readers": processes or (1 if args.test == "put" else args.readers),
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
            "items": gets,
            "seconds": round(get_s, 3),
            "items_per_s": round(gets / get_s),
            "aborts": ledger.aborts,
            "timeouts": ledger.timeouts,
        },
        "fsyncs": fsyncs,
        "compression": args.compression,
        "keys": args.keys,
        "key_order": feature_figures(run, extra),
        "disk": {"peak_bytes": run.disk.peak, "payload_bytes": ledger.put_bytes},
        **extra,
        "leftovers_skipped": ledger.leftovers,
        "validation_errors": errors,
        "ok": not errors,
        "interrupted": interrupted,
        "dir": run.directory,
        "dir_kept": bool(args.keep or args.dir),
    }
    if result.get("not_measured"):  # an interrupted --processes run: never zeros it did not measure
        put = result["put"]
        put["bytes"] = put["mb_per_s"] = None
        put["latency_us"] = dict.fromkeys(put["latency_us"])
        result["disk"]["payload_bytes"] = None
    return result


def feature_figures(run: Run, extra: dict[str, Any]) -> dict[str, Any] | None:
    """The key-order check's figures (None without ``--key-order``), and what it could not check."""
    if run.keycheck is None:
        return None
    figures: dict[str, Any] = dict(run.keycheck.figures())
    skipped = extra.pop("key_order_not_checked", None)
    if skipped:
        figures["not_checked"] = skipped
    return figures


def feature_lines(r: dict[str, Any]) -> list[str]:
    """Summary lines for bytes on disk, ``--compression`` and ``--keys``/``--key-order``."""
    disk = r["disk"]
    ratio = f" ({disk['peak_bytes'] / disk['payload_bytes']:.2f} x)" if disk["payload_bytes"] else ""
    codec = r["compression"] or "none (or what the queue had stored)"
    if r["compression"] and r["batch"] <= 1:
        codec += "; single puts stay plain: use --batch N"
    payloads = (
        "payloads put"
        if disk["payload_bytes"] is None
        else f"{disk['payload_bytes'] / 1e6:.1f} MB of payloads put"
    )
    lines = [
        f"  disk  {disk['peak_bytes'] / 1e6:.1f} MB at most in the queue directory{ratio} for "
        f"{payloads}; compression {codec}"
    ]
    if r["keys"]:
        ko = r["key_order"]
        if ko is None:
            lines.append(f"  keys  {r['keys']:,} (reader without key order: not checked)")
        else:
            lines.append(
                f"  keys  {r['keys']:,}, key order: {ko['checked']:,} keyed deliveries checked, "
                f"{ko['concurrent']:,} with another item of their key open, {ko['out_of_order']:,} "
                "out of id order"
            )
            if ko.get("not_checked"):
                lines.append(f"        not checked: {ko['not_checked']}")
    return lines


def format_summary(r: dict[str, Any]) -> str:
    """The one-screen, human summary of a result."""
    put, get, lat = r["put"], r["get"], r["put"]["latency_us"]
    who = f"{r['writers']} writer(s), {r['readers']} reader(s)"
    if r["test"] == "fanout":
        who = f"1 writer, {r['readers']} fan-out readers"
    if r.get("processes"):
        who = (
            f"{r['processes']} processes x {r['writers'] // r['processes']} writer(s) + 1 consumer, "
            "through an owner process"
        )
    batch = f", put_many x{r['batch']}" if r["batch"] > 1 else ""
    lines = [
        f"qtest {r['test']}: {who}, items {r['size']} B{batch}, {sync_words(r['sync'])}, hot path "
        f"{speedups.implementation}",
        f"  put   {put['items']:>10,} items in {put['seconds']:.2f} s  {put['items_per_s']:>9,} items/s"
        + (f"  {put['mb_per_s']:>7} MB/s" if put["mb_per_s"] is not None else ""),
        f"        latency per put call: p50 {lat['p50']} us  p99 {lat['p99']} us  "
        f"p99.9 {lat['p99.9']} us  max {lat['max']} us"
        if lat["p50"] is not None
        else f"        not measured: {r.get('not_measured')}",
        f"  got   {get['items']:>10,} deliveries in {get['seconds']:.2f} s  {get['items_per_s']:>9,} items/s"
        f"  (aborts {get['aborts']:,}, empty timeouts {get['timeouts']:,})",
    ]
    if r["fsyncs"] is not None:
        lines.append(f"  fsync rounds {r['fsyncs']:,}{' (owner process)' if r.get('processes') else ''}")
    lines.extend(feature_lines(r))
    if r.get("processes"):
        lines.extend(process_lines(r))
    if "replayed_after_reopen" in r:
        lines.append(
            f"  dead consumers left {r['open_at_close']} open reads; {r['replayed_after_reopen']} "
            "items redelivered after reopen"
        )
    if r["leftovers_skipped"]:
        lines.append(
            f"  {r['leftovers_skipped']:,} items left in the queue by earlier runs: skipped, not validated"
        )
    if not r["ok"]:
        lines.append(f"  validation: FAILED ({len(r['validation_errors'])} problems)")
        lines.extend(f"    - {e}" for e in r["validation_errors"][:10])
    elif r.get("not_measured"):  # --processes, interrupted: the workers' deliveries never came
        lines.append(
            f"  validation: NOTHING CHECKED (interrupted: the workers were stopped before they reported "
            f"their deliveries; {get['items']:,} counted)"
        )
    elif r["interrupted"] or not get["items"]:
        lines.append(partial_validation(r["interrupted"], get["items"]))
    elif r.get("owner_killed"):
        lines.append(
            "  validation: OK (every acknowledged put delivered, exactly once except reads "
            "the killed owner had handed out; per-producer order, payload hashes)"
        )
    else:
        keyed = ", key order" if r.get("key_order") else ""
        lines.append(f"  validation: OK (exactly once per reader, per-producer order, payload hashes{keyed})")
    lines.append(f"  queue directory: {r['dir']} ({'kept' if r['dir_kept'] else 'removed'})")
    return "\n".join(lines)


def partial_validation(interrupted: bool, deliveries: int) -> str:
    """The validation line of a run that cannot say "OK": one interrupted (Ctrl-C: the final
    drain was skipped) or one with no delivery to check.  Says what was and was not checked."""
    if not deliveries:
        why = "interrupted before any delivery" if interrupted else "no delivery to check"
        return f"  validation: NOTHING CHECKED ({why}; 0 deliveries)"
    return (
        f"  validation: PARTIAL (interrupted: the final drain was skipped; checked: the {deliveries:,} "
        "deliveries so far, for duplicates, order and payloads; not checked: that every "
        "acknowledged put was delivered)"
    )


def run_crash(args: argparse.Namespace, sync_given: bool) -> dict[str, Any]:
    """``qtest crash`` from parsed arguments (its queue is ``crash`` in ``--dir`` if given);
    without ``--sync`` each life picks always, periodic or never at random."""
    sync = args.sync if sync_given else "mixed"
    mode = sync if sync in ("always", "never", "mixed") else "periodic"
    plan = CrashPlan(
        cycles=args.cycles,
        seed=args.seed,
        mode=mode,
        directory=args.dir,
        keep=args.keep,
        compression=args.compression,
        keys=args.keys,
        key_order=bool(args.key_order),
    )
    return soak(plan, progress=not (args.json or args.no_progress))


def _report(args: argparse.Namespace, result: dict[str, Any]) -> int:
    text = (
        json.dumps(result)
        if args.json
        else (format_crash(result) if result["test"] == "crash" else format_summary(result))
    )
    print(text, flush=True)
    if result["interrupted"]:
        return 130
    return 0 if result["ok"] else 1


def cmd_qtest(args: argparse.Namespace) -> int:
    """Run a qtest from parsed arguments; print the summary or JSON (one object per test run);
    0 if validation passed, 1 if not, 130 if interrupted."""
    sync_given = args.sync is not None
    test = args.test or MAIN_JOB
    apply_defaults(args, test)
    if test == "crash":
        return _report(args, run_crash(args, sync_given))
    args.test = "put" if test == MAIN_JOB else test
    status = _report(args, run_qtest(args))
    if test != MAIN_JOB or status == 130:
        return status
    return max(status, _report(args, run_crash(args, sync_given)))


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
    """``scripts/qtest`` and ``python -m journaled.cli.qtest.main``: the same as ``journaled qtest``."""
    parser = argparse.ArgumentParser(
        prog="qtest",
        description="Load-test a journaled queue and validate every delivery.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_qtest_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return cmd_qtest(args)
    except UsageError as exc:
        parser.error(str(exc))
    except KeyboardInterrupt:
        print("qtest: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
