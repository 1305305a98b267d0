"""What ``journaled qtest``'s load tests run on: self-checking payloads, the ledger that proves
exactly-once delivery and per-producer order, and :class:`Run` (producers, consumers, timing).

Every payload carries ``(producer, sequence, hash)``, the hash covering the producer, the
sequence and the body, so the check at the end can prove that each item was delivered (or, with
aborts, committed) exactly once per reader, that each producer's items kept their order, and
that no byte changed.  The scenarios and the command are in cli/qtest/main.py.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
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

from journaled.cli.qtest.disk import DiskWatch
from journaled.cli.qtest.keys import KeyOrderCheck, choose_keys
from journaled.config import MiB, QueueConfig, ReaderConfig
from journaled.errors import Empty, OwnerLost, QueueClosed
from journaled.item import Item
from journaled.queue import JournaledQueue
from journaled.reader import Reader

TESTS = ("put", "flood", "timeout", "fanout", "leaky-reader", "crash")

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
class Observations:
    """What was put and what each reader saw, recorded without locks (one log per thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.produced: dict[int, int] = {}  # producer -> items put (sequences 0..n-1 tried)
        # producer -> sequences whose put raised OwnerLost(outcome_unknown): may or may not be stored
        self.unknown: dict[int, set[int]] = {}
        self.put_bytes = 0
        self.latencies: list[list[float]] = []
        # reader name -> per-thread logs of (item id, producer, seq, error_count)
        self.logs: dict[str, list[list[tuple[int, int, int, int]]]] = {}
        self.bad_payloads: list[str] = []
        self.failures: list[str] = []  # a worker that could not go on (reported as errors)
        self.aborts = 0
        self.timeouts = 0
        # items already in a reused --dir queue are not this run's: counted, never validated
        self.first_id = 1
        self.leftovers = 0
        # figures of the last validate(): acknowledged puts never delivered, tolerated
        # redeliveries, outcome-unknown puts delivered (and of those, lost with the owner),
        # puts stored more than once (one (producer, seq) under several item ids)
        self.missing = self.redelivered = self.unknown_delivered = self.stored_twice = 0

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
        if item.id < self.first_id:
            self.leftovers += 1  # racy counter: an approximate figure is enough
            return
        try:
            p, s = check_payload(item.data)
        except (ValueError, struct.error) as exc:
            with self._lock:
                self.bad_payloads.append(f"item {item.id}: {exc}")
            return
        log.append((item.id, p, s, item.error_count))

    def produced_figures(self, counts: list[int]) -> None:
        """An interrupted run's puts per producer, as figures only (nothing is validated)."""
        with self._lock:
            self.produced = dict(enumerate(counts))

    def starts_at(self, first_id: int) -> None:
        """Items below ``first_id`` were in the directory before this run: counted, never checked."""
        self.first_id = first_id

    def note_failure(self, text: str) -> None:
        """A worker thread could not go on: reported by ``validate`` as an error."""
        with self._lock:
            self.failures.append(text)

    def note_bad_payload(self, text: str) -> None:
        """A delivered payload that fails its check: reported by ``validate`` as an error."""
        with self._lock:
            self.bad_payloads.append(text)

    def absorb(self, reader: str, data: dict[str, Any]) -> list[tuple[int, int, int, int, int]]:
        """Fold in the ledger a worker process wrote (``procs_worker.py``'s JSON), its deliveries
        as one log of ``reader``; returns them as (id, producer, seq, errors, pre-kill flag)."""
        for p, count in data["produced"].items():
            self.add_produced(int(p), count, 0, set(data["unknown"].get(p, ())))
        entries = [(int(i), int(p), int(s), int(e), int(first)) for i, p, s, e, first in data["log"]]
        self.new_log(reader).extend((i, p, s, e) for i, p, s, e, _first in entries)
        with self._lock:
            self.put_bytes += data["put_bytes"]
            self.latencies.extend(data["latencies"])
            self.bad_payloads.extend(data["bad_payloads"])
            self.failures.extend(data["failures"])
            self.leftovers += data["leftovers"]
            self.timeouts += data["timeouts"]
        return entries

    def delivered(self, reader: str | None = None) -> int:
        names = [reader] if reader is not None else list(self.logs)
        return sum(len(log) for n in names for log in self.logs.get(n, []))

    def add_produced(self, producer: int, count: int, nbytes: int, unknown: set[int] | None = None) -> None:
        """Producer ``producer`` tried sequences ``0..count-1`` (``unknown`` of them with an
        unknown outcome) and put ``nbytes`` acknowledged bytes."""
        with self._lock:
            self.produced[producer] = count
            self.put_bytes += nbytes
            if unknown:
                self.unknown.setdefault(producer, set()).update(unknown)

    def validate(
        self,
        ordered_logs: bool,
        complete: bool = True,
        may_redeliver: Callable[[tuple[int, int]], bool] | None = None,
    ) -> list[str]:
        """Every reader: each acknowledged (producer, seq) exactly once, per-producer order kept by
        item ids (and, if ``ordered_logs``, within each consumer thread's log), intact payloads.
        A put with an unknown outcome may be missing.  ``may_redeliver(key)``: that item may be
        delivered one extra time (its read was open, or not yet checkpointed, when the owner was
        killed): counted in ``redelivered``, not an error.  An item id that names two payloads
        is always an error: an item handed to another process survives its owner's kill.
        ``complete=False`` (an interrupted run) checks only what was delivered."""
        errors = list(self.bad_payloads) + self.failures
        maybe = {(p, s) for p, seqs in self.unknown.items() for s in seqs}
        acked = sum(self.produced.values()) - len(maybe)
        self.missing = self.redelivered = self.unknown_delivered = self.stored_twice = 0
        for name, logs in sorted(self.logs.items()):
            entries = [e for log in logs for e in log]
            counts = Counter((p, s) for _i, p, s, _e in entries)
            unknown = [k for k in counts if not k[1] < self.produced.get(k[0], 0)]
            extra = {k: c - 1 for k, c in counts.items() if c > 1}
            allowed_first = {k for k in counts if may_redeliver is not None and may_redeliver(k)}
            allowed = allowed_first & extra.keys()
            self.redelivered += sum(min(1, extra[k]) for k in allowed)
            dups = sum(extra.values()) - len(allowed)
            maybe_got = sum(1 for k in counts if k in maybe)
            self.unknown_delivered += maybe_got
            missing = acked - (len(counts) - len(unknown) - maybe_got)
            if unknown:
                errors.append(f"reader {name}: {len(unknown)} items never put, e.g. {unknown[:3]}")
            if dups:
                errors.append(f"reader {name}: {dups} duplicate deliveries")
            if missing and complete:
                self.missing += missing
                errors.append(f"reader {name}: {missing} items never delivered")
            by_id: dict[int, set[tuple[int, int]]] = {}
            for i, p, s, _e in entries:
                by_id.setdefault(i, set()).add((p, s))
            if any(len(keys) > 1 for keys in by_id.values()):
                errors.append(f"reader {name}: one item id delivered with two payloads")
            # a redelivery comes back under its id; a put stored twice under a second one, and
            # no owner's death excuses that
            ids_of: dict[tuple[int, int], set[int]] = {}
            for i, p, s, _e in entries:
                ids_of.setdefault((p, s), set()).add(i)
            twice = sum(len(ids) - 1 for ids in ids_of.values())
            if twice:
                self.stored_twice = max(self.stored_twice, twice)
                errors.append(f"reader {name}: {twice} puts stored more than once (under several ids)")
            last: dict[int, int] = {}
            for i, (p, s) in sorted((i, k) for i, keys in by_id.items() for k in keys):
                if s <= last.get(p, -1):
                    errors.append(f"reader {name}: producer {p} seq {s} has a later id than seq {last[p]}")
                    break
                last[p] = s
            if ordered_logs:  # a redelivered item comes back out of order: only the others count
                for log in logs:
                    seen: dict[int, int] = {}
                    for _i, p, s, _e in log:
                        if (p, s) in allowed:
                            continue
                        if s <= seen.get(p, -1):
                            errors.append(
                                f"reader {name}: one consumer got producer {p} seq {s} after {seen[p]}"
                            )
                            break
                        seen[p] = s
        return errors


# --------------------------------------------------------------------------------- workers
class Run:
    """One qtest run: options, queue, ledger, stop flags and the progress display."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.ledger = Observations()
        self.stop_producing = threading.Event()
        self.producers_done = threading.Event()
        self.interrupted = threading.Event()  # Ctrl-C: every worker thread returns at once
        self.threads: list[threading.Thread] = []
        self.opened = False
        self.directory = args.dir or tempfile.mkdtemp(prefix="qtest-")
        self.disk = DiskWatch(self.directory)  # the peak bytes on disk (main.py runs it)
        self.config = queue_config(args)
        self.reader_config = ReaderConfig(
            max_memory=int(args.reader_memory * MiB), key_order=bool(getattr(args, "key_order", False))
        )
        # --key-order: every consumer's deliveries checked live (cli/qtest/keys.py)
        self.keycheck = KeyOrderCheck() if self.reader_config.key_order else None
        self.put_count = [0] * max(1, args.writers)  # per producer, for the progress display
        self._filler = random.Random(args.seed).randbytes(args.size[1] + _FILLER_SPREAD)

    def count_producers(self, n: int) -> None:
        """The progress display counts ``n`` producers (threads of every process) from zero."""
        self.put_count = [0] * n

    def note_puts(self, producer: int, puts: int) -> None:
        """Producer ``producer`` (of any process) has put ``puts`` items so far."""
        self.put_count[producer] = puts

    def open(self) -> JournaledQueue:
        q = JournaledQueue(self.directory, self.config, name="qtest")
        if not self.opened:
            self.opened = True
            self.ledger.starts_at(q.stats().next_id)
        return q

    def start(self, target: Callable[..., Any], *args: Any, **kwargs: Any) -> threading.Thread:
        """A worker thread this run can stop and join when interrupted."""
        t = start_thread(target, *args, **kwargs)
        self.threads.append(t)
        return t

    def stop(self, wait: float = 10.0) -> None:
        """Ctrl-C: tell every worker thread to return and wait (boundedly) until they have."""
        self.interrupted.set()
        self.stop_producing.set()
        self.producers_done.set()
        end = time.monotonic() + wait
        for t in self.threads:
            t.join(max(0.0, end - time.monotonic()))

    def deadline(self) -> float:
        return time.monotonic() + float(self.args.seconds)

    def produce(self, q: JournaledQueue, p: int, count: int | None, pause: float = 0.0) -> None:
        """Producer ``p``: put ``count`` items (or until told to stop), timing each put."""
        args, ledger = self.args, self.ledger
        rng = random.Random(args.seed * 1_000_003 + p)
        lo, hi = args.size
        lat = ledger.new_latencies()
        clock = time.perf_counter
        filler = self._filler
        batch = max(1, args.batch)
        nkeys = int(getattr(args, "keys", 0) or 0)
        stop = self.stop_producing
        counter = self.put_count
        seq = 0
        nbytes = 0
        unknown: set[int] = set()
        pending = 0
        try:
            while (count is None or seq < count) and not stop.is_set():
                n = batch if count is None else min(batch, count - seq)
                payloads = [
                    make_payload(p, seq + k, lo if lo == hi else rng.randint(lo, hi), filler)
                    for k in range(n)
                ]
                keys = choose_keys(rng, nkeys, n) if nkeys else None
                t0 = clock()
                pending = n  # until counted below: a Ctrl-C leaves these stored or not
                try:
                    # group keys, not de-duplication keys: a --dir's dedup window must not apply
                    if keys is not None:
                        q.put_many(payloads, keys=keys, dedup=False)
                    elif n == 1:
                        q.put(payloads[0])
                    else:
                        q.put_many(payloads)
                except QueueClosed:
                    break  # interrupted: the queue was closed under us; these were never put
                except OwnerLost as exc:  # a client of another process's queue (cli/qtest/procs.py)
                    if not exc.outcome_unknown:
                        with ledger._lock:
                            ledger.failures.append(f"producer {p}: {exc}")
                        break
                    # the client retried it on the next owners and gave up (PUT_RETRY), or the owner
                    # stopped answering without dying: stored or not, never retried here (twice?)
                    unknown.update(range(seq, seq + n))
                    seq += n
                    pending = 0
                    counter[p] = seq
                    continue
                lat.append(clock() - t0)
                seq += n
                pending = 0
                nbytes += sum(map(len, payloads))
                counter[p] = seq
                if pause:
                    time.sleep(pause)
        except KeyboardInterrupt:
            # Ctrl-C on this thread (fanout's producer is the main thread): the batch in flight
            # may or may not be stored, and what was put before it is still this run's to check
            unknown.update(range(seq, seq + pending))
            ledger.add_produced(p, seq + pending, nbytes, unknown)
            raise
        ledger.add_produced(p, seq, nbytes, unknown)

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

        With ``abort_rate`` some reads are aborted instead, while the producers run (so even a
        rate of 1.0 ends); with ``die_after`` the consumer stops after that many gets and leaves
        its last read open ("dies holding it").
        """
        ledger = self.ledger
        log = ledger.new_log(reader.name)
        rng = random.Random(seed)
        gets = 0
        while not self.interrupted.is_set():
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
            check = self.keycheck
            if check is not None:
                check.got(reader.name, item.key, item.id)
            if die_after is not None and gets >= die_after:
                return gets  # dies with ``item`` open: never committed nor aborted
            try:
                if abort_rate and not self.producers_done.is_set() and rng.random() < abort_rate:
                    if check is not None:  # before the abort frees the key in the queue
                        check.release(reader.name, item.key, item.id)
                    reader.abort(item)
                    ledger.aborts += 1
                    continue
                ledger.record(log, item)
                if check is not None:  # before the commit frees the key in the queue
                    check.release(reader.name, item.key, item.id)
                reader.commit(item)
            except QueueClosed:
                return gets
        return gets

    def drain(self, reader: Reader) -> int:
        """Take and commit everything left, on this thread (with a progress bar of its own)."""
        log = self.ledger.new_log(reader.name)
        done = [0]
        with self.progress(None, desc=f"drain {reader.name}", unit=" gets", count=lambda: done[0]):
            while True:
                try:
                    item = reader.get(block=False)
                except Empty:
                    return done[0]
                self.ledger.record(log, item)
                if self.keycheck is not None:
                    self.keycheck.got(reader.name, item.key, item.id)
                    self.keycheck.release(reader.name, item.key, item.id)
                reader.commit(item)
                done[0] += 1

    @contextmanager
    def progress(
        self,
        total: int | None,
        desc: str = "put",
        unit: str = " puts",
        count: Callable[[], int] | None = None,
    ) -> Iterator[None]:
        """A tqdm bar on stderr, only when stderr is a terminal (never in pipes, CI, --json);
        it counts puts unless ``count`` says what else to count."""
        bar: Any = None
        if not self.args.no_progress and not self.args.json and sys.stderr.isatty():
            try:  # optional (the dev extra has it); imported by name so no stubs are needed
                tqdm: Any = importlib.import_module("tqdm").tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                bar = tqdm(total=total, desc=desc, unit=unit, unit_scale=True, leave=False, file=sys.stderr)
        stop = threading.Event()

        def tick() -> None:
            shown = 0
            while not stop.wait(0.2):
                now = count() if count is not None else sum(self.put_count)
                bar.update(now - shown)
                if count is None:
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


def queue_config(args: argparse.Namespace) -> QueueConfig:
    """The queue settings of a run: ``--sync``, ``--journal-size``, ``--compression``."""
    return QueueConfig(
        sync=args.sync,
        journal_size=int(args.journal_size * MiB),
        compression=getattr(args, "compression", None),
    )


def start_thread(target: Callable[..., Any], *args: Any, **kwargs: Any) -> threading.Thread:
    t = threading.Thread(target=target, args=args, kwargs=kwargs, daemon=True)
    t.start()
    return t


def join_all(threads: Sequence[threading.Thread]) -> None:
    for t in threads:
        t.join()


# --------------------------------------------------------------------------------- the tests
