#!/usr/bin/env python3
"""Every item once per reader under threads: delayed puts, read-behind, live ``max_memory`` changes.

Producer threads put ``--items`` small items, a share of them with a ``delay`` (``not_before``);
consumer threads get and commit them (a few are aborted with a short delay first) from one reader
whose ``max_memory`` is small, so it reads behind nearly all the time; a tuner thread changes that
``max_memory`` live (``q.reader(name, ReaderConfig(...))``) between small and large values.  At the
end (every delay passed, the backlog empty) it counts, by item id:

* duplicates: items committed more than once, or delivered more often than once plus their aborts
  (a commit refused with ``UnknownRead`` is counted too: the id was handed out again meanwhile);
* losses: items put and never committed (the log's "lost (journal damage)" warnings are counted
  apart: they are issue 34's point 1, a different bug);
* order: deliveries of an id below one already delivered first, among items neither delayed nor
  aborted (informative only: concurrent consumers interleave).

    python scripts/stress_delayed_readbehind.py                 # 100,000 items, the defaults
    python scripts/stress_delayed_readbehind.py --items 20000 --max-memory 2048 --seed 7 --json
    PYTHONPATH=/path/to/other/checkout python scripts/stress_delayed_readbehind.py   # another version

Exit status 1 when a duplicate or a loss was seen.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import random
import sys
import tempfile
import threading
import time


class _Lost(logging.Handler):
    """Counts the read path's "items a..b are lost (journal damage)" warnings (ids, not records)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.ids = 0

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "are lost (journal damage)" in msg:
            first, last = msg.split("items ", 1)[1].split(" are lost", 1)[0].split("..")
            self.ids += int(last) - int(first) + 1


def run(args: argparse.Namespace) -> dict[str, object]:
    import journaled
    from journaled import Empty, JournaledQueue, QueueConfig, ReaderConfig
    from journaled.errors import UnknownRead

    rng = random.Random(args.seed)
    lost_log = _Lost()
    logging.getLogger("journaled").addHandler(lost_log)
    lock = threading.Lock()
    put_ids: list[int] = []
    delayed: set[int] = set()
    delivered: collections.Counter[int] = collections.Counter()
    committed: collections.Counter[int] = collections.Counter()
    aborts: collections.Counter[int] = collections.Counter()
    refused: collections.Counter[int] = collections.Counter()
    stop = threading.Event()
    errors: list[BaseException] = []
    per_producer = args.items // args.producers
    payload = b"x" * args.payload

    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        q = JournaledQueue(d, QueueConfig(sync="never", journal_size=args.journal_size), name="q")
        reader = q.reader("r", ReaderConfig(start="earliest", max_memory=args.max_memory))

        def produce(seed: int) -> None:
            prng = random.Random(seed)
            try:
                for _ in range(per_producer):
                    if prng.random() < args.delayed:
                        i = q.put(payload, delay=prng.uniform(0.0, args.max_delay))
                        with lock:
                            delayed.add(i)
                            put_ids.append(i)
                    else:
                        i = q.put(payload)
                        with lock:
                            put_ids.append(i)
            except BaseException as exc:  # reported, never swallowed
                errors.append(exc)

        def consume(seed: int) -> None:
            prng = random.Random(seed)
            try:
                while not stop.is_set():
                    try:
                        item = reader.get(timeout=0.05)
                    except Empty:
                        continue
                    with lock:
                        delivered[item.id] += 1
                    if prng.random() < args.abort_rate:
                        with lock:
                            aborts[item.id] += 1
                        reader.abort(item, delay=prng.uniform(0.0, 0.01))
                        continue
                    try:
                        reader.commit(item)
                    except UnknownRead:
                        # the same id was handed out again meanwhile (a duplicate): that read
                        # replaced this one, so this commit is refused
                        with lock:
                            refused[item.id] += 1
                        continue
                    with lock:
                        committed[item.id] += 1
            except BaseException as exc:
                errors.append(exc)

        def tune(seed: int) -> None:
            prng = random.Random(seed)
            sizes = [args.max_memory, args.max_memory * 4, 1 << 16, 1 << 20]
            try:
                while not stop.is_set():
                    q.reader("r", ReaderConfig(start="earliest", max_memory=prng.choice(sizes)))
                    time.sleep(prng.uniform(0.0, 0.02))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=produce, args=(rng.random(),)) for _ in range(args.producers)]
        consumers = [threading.Thread(target=consume, args=(rng.random(),)) for _ in range(args.consumers)]
        tuner = [threading.Thread(target=tune, args=(rng.random(),))] if args.tune else []
        start = time.monotonic()
        for t in threads + consumers + tuner:
            t.start()
        for t in threads:
            t.join()
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline and not errors:
            st = reader.stats()
            if st.backlog_items == 0:
                break
            time.sleep(0.05)
        stop.set()
        for t in consumers + tuner:
            t.join()
        elapsed = time.monotonic() - start
        backlog = reader.stats().backlog_items
        q.close()
    logging.getLogger("journaled").removeHandler(lost_log)

    dup_commits = sorted(i for i, n in committed.items() if n > 1)
    dup_deliveries = sorted(i for i, n in delivered.items() if n > aborts[i] + 1)
    never = sorted(set(put_ids) - set(committed))
    return {
        "version": journaled.__file__,
        "items": len(put_ids),
        "delayed": len(delayed),
        "aborted": sum(aborts.values()),
        "max_memory": args.max_memory,
        "tune": args.tune,
        "seed": args.seed,
        "seconds": round(elapsed, 1),
        "duplicate_commits": len(dup_commits),
        "duplicate_deliveries": len(dup_deliveries),
        "duplicates_of_delayed": sum(1 for i in dup_deliveries if i in delayed),
        "commits_refused": sum(refused.values()),
        "lost": len(never),
        "lost_logged_as_damage": lost_log.ids,
        "backlog_left": backlog,
        "errors": [repr(e) for e in errors],
        "examples": {"duplicates": dup_deliveries[:10], "lost": never[:10]},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--items", type=int, default=100_000, help="items put in all (default 100000)")
    p.add_argument("--producers", type=int, default=2)
    p.add_argument("--consumers", type=int, default=2)
    p.add_argument("--payload", type=int, default=16, help="payload bytes per item (default 16)")
    p.add_argument("--max-memory", type=int, default=4096, help="the reader's max_memory (default 4096)")
    p.add_argument("--delayed", type=float, default=0.3, help="share of puts with a delay (default 0.3)")
    p.add_argument("--max-delay", type=float, default=0.05, help="longest delay in seconds (default 0.05)")
    p.add_argument(
        "--abort-rate", type=float, default=0.01, help="share of deliveries aborted (default 0.01)"
    )
    p.add_argument("--no-tune", dest="tune", action="store_false", help="keep max_memory as it is")
    p.add_argument("--journal-size", type=int, default=1 << 20, help="journal file size (default 1 MiB)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the backlog to drain")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dir", default=None, help="where the queue's temporary directory goes")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = p.parse_args(argv)
    result = run(args)
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:24} {v}")
    bad = result["duplicate_commits"] or result["duplicate_deliveries"] or result["lost"] or result["errors"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
