"""``journaled qtest``: load tests that also validate what they measure.

Five tests in the libkestrel ``qtest`` tradition (``put``, ``flood``, ``timeout``, ``fanout``,
``leaky-reader``).  Every payload carries ``(producer, sequence, hash)``, the hash covering the
producer, the sequence and the body, so the check at the end can prove that each item was
delivered (or, with aborts, committed) exactly once per reader, that each producer's items kept
their order, and that no byte changed.  A failed check makes the command exit with status 1.

Throughput figures include making and checking payloads (a few microseconds per item); they
measure the queue as an application sees it, not the bare library: see scripts/bench_peers.py.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import random
import shutil
import struct
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from journaled.config import MiB, QueueConfig, ReaderConfig
from journaled.errors import Empty, QueueClosed
from journaled.item import Item
from journaled.queue import JournaledQueue
from journaled.reader import Reader

TESTS = ("put", "flood", "timeout", "fanout", "leaky-reader")

# producer(u32) sequence(u64) blake2b-8 over producer, sequence and body
_TAG = struct.Struct("<IQ8s")
_KEY = struct.Struct("<IQ")
MIN_SIZE = _TAG.size  # 20
_FILLER_SPREAD = 251  # bodies start at seq % 251 of a random filler, so neighbours differ


# --------------------------------------------------------------------------------- payloads
def _digest(producer: int, seq: int, body: bytes | memoryview) -> bytes:
    h = hashlib.blake2b(_KEY.pack(producer, seq), digest_size=8)
    h.update(body)
    return h.digest()


def make_payload(producer: int, seq: int, size: int, filler: bytes = b"") -> bytes:
    """A self-checking payload of exactly ``size`` bytes (``size >= MIN_SIZE``).

    ``filler`` supplies the body bytes (it must hold ``size + 251`` bytes); without it the body
    is a repeated text pattern.
    """
    n = max(0, size - MIN_SIZE)
    if filler:
        start = seq % _FILLER_SPREAD
        body = filler[start : start + n]
    else:
        body = ((b"%d:%d:" % (producer, seq)) * (n // 4 + 1))[:n]
    return _TAG.pack(producer, seq, _digest(producer, seq, body)) + body


def check_payload(data: bytes) -> tuple[int, int]:
    """``(producer, seq)`` of a payload made by :func:`make_payload`; ValueError if damaged."""
    if len(data) < MIN_SIZE:
        raise ValueError(f"payload of {len(data)} bytes is shorter than its tag")
    producer, seq, digest = _TAG.unpack_from(data)
    if _digest(producer, seq, memoryview(data)[MIN_SIZE:]) != digest:
        raise ValueError(f"payload hash mismatch (producer {producer}, seq {seq})")
    return producer, seq


def parse_size(text: str) -> tuple[int, int]:
    """``"1024"`` -> (1024, 1024); ``"100-4096"`` -> (100, 4096) (uniform per item)."""
    lo_s, _, hi_s = text.partition("-")
    try:
        lo = int(lo_s)
        hi = int(hi_s) if hi_s else lo
    except ValueError:
        raise argparse.ArgumentTypeError(f"size must be N or MIN-MAX bytes, got {text!r}") from None
    if lo < MIN_SIZE or hi < lo:
        raise argparse.ArgumentTypeError(
            f"size must be at least {MIN_SIZE} bytes (the validation tag) and MIN <= MAX, got {text!r}"
        )
    return lo, hi


def parse_sync(text: str) -> Any:
    """``always`` | ``never`` | seconds, as :class:`QueueConfig` takes it."""
    if text in ("always", "never"):
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sync must be always, never or SECONDS, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"--sync seconds must be positive, got {text!r}")
    return value


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of already sorted values (0.0 for none)."""
    if not sorted_values:
        return 0.0
    k = min(len(sorted_values) - 1, int(round(p / 100 * (len(sorted_values) - 1))))
    return sorted_values[k]


# --------------------------------------------------------------------------------- checking
class Ledger:
    """What was put and what each reader saw, recorded without locks (one log per thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.produced: dict[int, int] = {}  # producer -> items put
        self.put_bytes = 0
        self.latencies: list[list[float]] = []
        # reader name -> per-thread logs of (item id, producer, seq, error_count)
        self.logs: dict[str, list[list[tuple[int, int, int, int]]]] = {}
        self.bad_payloads: list[str] = []
        self.aborts = 0
        self.timeouts = 0

    def new_log(self, reader: str) -> list[tuple[int, int, int, int]]:
        log: list[tuple[int, int, int, int]] = []
        with self._lock:
            self.logs.setdefault(reader, []).append(log)
        return log

    def new_latencies(self) -> list[float]:
        lat: list[float] = []
        with self._lock:
            self.latencies.append(lat)
        return lat

    def record(self, log: list[tuple[int, int, int, int]], item: Item) -> None:
        try:
            p, s = check_payload(item.data)
        except (ValueError, struct.error) as exc:
            with self._lock:
                self.bad_payloads.append(f"item {item.id}: {exc}")
            return
        log.append((item.id, p, s, item.error_count))

    def delivered(self, reader: str | None = None) -> int:
        names = [reader] if reader is not None else list(self.logs)
        return sum(len(log) for n in names for log in self.logs.get(n, []))

    def validate(self, ordered_logs: bool) -> list[str]:
        """Every reader: each (producer, seq) exactly once, per-producer order kept by item
        ids (and, if ``ordered_logs``, within each consumer thread's log), intact payloads."""
        errors = list(self.bad_payloads)
        total = sum(self.produced.values())
        for name, logs in sorted(self.logs.items()):
            entries = [e for log in logs for e in log]
            counts = Counter((p, s) for _i, p, s, _e in entries)
            unknown = [k for k in counts if not k[1] < self.produced.get(k[0], 0)]
            dups = sum(c - 1 for c in counts.values() if c > 1)
            missing = total - (len(counts) - len(unknown))
            if unknown:
                errors.append(f"reader {name}: {len(unknown)} items never put, e.g. {unknown[:3]}")
            if dups:
                errors.append(f"reader {name}: {dups} duplicate deliveries")
            if missing:
                errors.append(f"reader {name}: {missing} items never delivered")
            ids = Counter(i for i, _p, _s, _e in entries)
            if any(c > 1 for c in ids.values()) and not dups:
                errors.append(f"reader {name}: one item id delivered with two payloads")
            last: dict[int, int] = {}
            for _i, p, s, _e in sorted(entries):
                if s <= last.get(p, -1):
                    errors.append(f"reader {name}: producer {p} seq {s} has a later id than seq {last[p]}")
                    break
                last[p] = s
            if ordered_logs:
                for log in logs:
                    seen: dict[int, int] = {}
                    for _i, p, s, _e in log:
                        if s <= seen.get(p, -1):
                            errors.append(f"reader {name}: one consumer got producer {p} seq {s} after {seen[p]}")
                            break
                        seen[p] = s
        return errors


# --------------------------------------------------------------------------------- workers
class Run:
    """One qtest run: options, queue, ledger, stop flags and the progress display."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.ledger = Ledger()
        self.stop_producing = threading.Event()
        self.producers_done = threading.Event()
        self.directory = args.dir or tempfile.mkdtemp(prefix="qtest-")
        self.config = QueueConfig(sync=args.sync, journal_size=int(args.journal_size * MiB))
        self.reader_config = ReaderConfig(max_memory=int(args.reader_memory * MiB))
        self.put_count = [0] * max(1, args.writers)
        self._filler = random.Random(args.seed).randbytes(args.size[1] + _FILLER_SPREAD)

    def open(self) -> JournaledQueue:
        return JournaledQueue(self.directory, self.config, name="qtest")

    def deadline(self) -> float:
        return time.monotonic() + float(self.args.seconds)

    def produce(
        self, q: JournaledQueue, p: int, count: int | None, pause: float = 0.0
    ) -> None:
        """Producer ``p``: put ``count`` items (or until told to stop), timing each put."""
        args, ledger = self.args, self.ledger
        rng = random.Random(args.seed * 1_000_003 + p)
        lo, hi = args.size
        lat = ledger.new_latencies()
        clock = time.perf_counter
        filler = self._filler
        batch = max(1, args.batch)
        stop = self.stop_producing
        counter = self.put_count
        seq = 0
        nbytes = 0
        while (count is None or seq < count) and not stop.is_set():
            n = batch if count is None else min(batch, count - seq)
            payloads = [
                make_payload(p, seq + k, lo if lo == hi else rng.randint(lo, hi), filler) for k in range(n)
            ]
            t0 = clock()
            if n == 1:
                q.put(payloads[0])
            else:
                q.put_many(payloads)
            lat.append(clock() - t0)
            seq += n
            nbytes += sum(map(len, payloads))
            counter[p] = seq
            if pause:
                time.sleep(pause)
        with ledger._lock:
            ledger.produced[p] = seq
            ledger.put_bytes += nbytes

    def consume(
        self,
        reader: Reader,
        *,
        timeout: float = 0.05,
        abort_rate: float = 0.0,
        die_after: int | None = None,
        seed: int = 0,
        until: Callable[[], bool] | None = None,
    ) -> int:
        """Get + commit until the producers are done and nothing is left (or ``until()``).

        With ``abort_rate`` some reads are aborted instead; with ``die_after`` the consumer
        stops after that many gets and leaves its last read open ("dies holding it").
        """
        ledger = self.ledger
        log = ledger.new_log(reader.name)
        rng = random.Random(seed)
        gets = 0
        while True:
            if until is not None and until():
                return gets
            try:
                item = reader.get(timeout=timeout)
            except Empty:
                ledger.timeouts += 1  # racy counter: an approximate figure is enough
                if self.producers_done.is_set() and until is None:
                    return gets
                continue
            except QueueClosed:
                return gets
            gets += 1
            if die_after is not None and gets >= die_after:
                return gets  # dies with ``item`` open: never committed nor aborted
            if abort_rate and rng.random() < abort_rate:
                reader.abort(item)
                ledger.aborts += 1
                continue
            ledger.record(log, item)
            reader.commit(item)

    def drain(self, reader: Reader) -> int:
        """Take and commit everything left, on this thread."""
        log = self.ledger.new_log(reader.name)
        n = 0
        while True:
            try:
                item = reader.get(block=False)
            except Empty:
                return n
            self.ledger.record(log, item)
            reader.commit(item)
            n += 1

    @contextmanager
    def progress(self, total: int | None) -> Iterator[None]:
        """A tqdm bar on stderr, only when stderr is a terminal (never in pipes, CI, --json)."""
        bar: Any = None
        if not self.args.no_progress and not self.args.json and sys.stderr.isatty():
            try:  # optional (the dev extra has it); imported by name so no stubs are needed
                tqdm: Any = importlib.import_module("tqdm").tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                bar = tqdm(total=total, unit=" puts", unit_scale=True, leave=False, file=sys.stderr)
        stop = threading.Event()

        def tick() -> None:
            shown = 0
            while not stop.wait(0.2):
                now = sum(self.put_count)
                bar.update(now - shown)
                bar.set_postfix(delivered=self.ledger.delivered(), refresh=False)
                shown = now

        ticker = threading.Thread(target=tick, daemon=True) if bar is not None else None
        if ticker is not None:
            ticker.start()
        try:
            yield
        finally:
            stop.set()
            if ticker is not None:
                ticker.join()
                bar.close()

    def cleanup(self) -> None:
        if not self.args.keep and not self.args.dir:
            shutil.rmtree(self.directory, ignore_errors=True)


def _start(target: Callable[..., Any], *args: Any, **kwargs: Any) -> threading.Thread:
    t = threading.Thread(target=target, args=args, kwargs=kwargs, daemon=True)
    t.start()
    return t


def _join(threads: Sequence[threading.Thread]) -> None:
    for t in threads:
        t.join()


# --------------------------------------------------------------------------------- the tests
def test_put(run: Run, q: JournaledQueue) -> dict[str, Any]:
    """N threads put as fast as they can; then one reader drains and validates everything."""
    args = run.args
    reader = q.reader("qtest", run.reader_config)
    per = max(1, args.items // args.writers)
    with run.progress(per * args.writers):
        t0 = time.perf_counter()
        threads = [_start(run.produce, q, p, per) for p in range(args.writers)]
        if args.seconds:
            timer = threading.Timer(args.seconds, run.stop_producing.set)
            timer.start()
        _join(threads)
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
        consumers = [_start(run.consume, reader, seed=r, **consume_kw) for r in range(args.readers)]
        producers = [_start(run.produce, q, p, None, *produce_extra) for p in range(args.writers)]
        time.sleep(args.seconds)
        run.stop_producing.set()
        _join(producers)
        put_s = time.perf_counter() - t0
        run.producers_done.set()
        _join(consumers)
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
        consumers = [_start(run.consume, r, seed=k) for k, r in enumerate(readers)]
        if args.seconds:
            timer = threading.Timer(args.seconds, run.stop_producing.set)
            timer.start()
        run.produce(q, 0, args.items)
        if args.seconds:
            timer.cancel()
        put_s = time.perf_counter() - t0
        run.producers_done.set()
        _join(consumers)
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
            _start(run.consume, reader, abort_rate=args.abort_rate, seed=r) for r in range(args.readers)
        ]
        dying = [
            _start(run.consume, reader, die_after=1 + k % 5, seed=1000 + k) for k in range(args.dying)
        ]
        producers = [_start(run.produce, q, p, None) for p in range(args.writers)]
        time.sleep(args.seconds)
        run.stop_producing.set()
        _join(producers)
        put_s = time.perf_counter() - t0
        run.producers_done.set()
        _join(consumers + dying)
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
        f"qtest {r['test']}: {who}, items {r['size']} B{batch}, sync={r['sync']}",
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
