"""The child processes of ``journaled qtest put --processes N`` (cli/qtest/procs.py is the parent).

``python -m journaled.cli.qtest.procs_worker owner PLAN`` opens the queue first, so it owns it and
serves the others; it only waits to be told to close (or to be killed with ``--kill-owner``).
``python -m journaled.cli.qtest.procs_worker worker PLAN K`` is worker K: ``JournaledQueue(path)``
gives it a client of the owner; it runs ``--writers`` producer threads (producers
``K*W .. K*W+W-1``, :meth:`~journaled.cli.qtest.run.Run.produce`) and one consumer of the reader
``qtest``, and writes its ledger to ``ledger-K.json`` for the parent to check.  Lines on stdout:

    R PID              ready; PID is the process that owns the queue now
    N PUTS GETS        progress, every 20 ms
    P                  this worker's producers are done
    E IS_OWNER         its consumer found nothing more and its ledger is written
    F FSYNCS           (owner) closed after FSYNCS fsync rounds

and on stdin the parent's ``go`` (start), ``done`` (every producer is done: drain and stop),
``exit`` (close the queue and end); end of input counts as ``exit``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any

from journaled.cli.qtest.run import Run, check_payload, join_all
from journaled.errors import Empty, JournaledError, OwnerLost, QueueClosed

#: the reader every worker consumes from
READER = "qtest"
#: seconds between progress lines
TICK = 0.02


def plan_args(plan: dict[str, Any]) -> argparse.Namespace:
    """The qtest options of a plan written by the parent (``--dir`` is the queue's directory)."""
    args = argparse.Namespace(**plan["args"])
    args.size = tuple(args.size)
    args.dir = plan["directory"]  # so Run neither makes nor removes a directory of its own
    return args


class Worker:
    """One worker process: the commands from the parent and what it writes back."""

    def __init__(self, plan: dict[str, Any], index: int) -> None:
        self.plan, self.index = plan, index
        self.args = plan_args(plan)
        self.run = Run(self.args)
        self.run.ledger.starts_at(int(plan["first_id"]))
        self.run.count_producers(self.args.writers * self.args.processes)
        self.go, self.done, self.leave = threading.Event(), threading.Event(), threading.Event()
        self.out_lock = threading.Lock()
        self.log: list[tuple[int, int, int, int, int]] = []  # id, producer, seq, errors, pre-kill
        # --key-order: (got at, released at, key, id) on the machine's monotonic clock, so the
        # parent can find two processes holding items of one key at once (cli/qtest/keys.py)
        self.keylog: list[tuple[float, float, str, int]] = []
        self.gets = self.timeouts = self.leftovers = self.commits_refused = self.puts_retried = 0

    def emit(self, line: str) -> None:
        with self.out_lock:
            os.write(1, (line + "\n").encode())

    def commands(self) -> None:
        """Read the parent's commands; end of input (the parent is gone) means leave."""
        for line in sys.stdin:
            word = line.strip()
            if word == "go":
                self.go.set()
            elif word == "done":
                self.done.set()
            elif word == "exit":
                break
        self.go.set()
        self.done.set()
        self.leave.set()

    def guarded(self, what: str, target: Any, *args: Any) -> None:
        """Run a thread's work; an unexpected error is a failure of the run, never silence."""
        try:
            target(*args)
        except Exception as exc:  # noqa: BLE001 - reported to the parent in the ledger
            self.run.ledger.note_failure(f"worker {self.index} {what}: {type(exc).__name__}: {exc}")
            traceback.print_exc()

    def consume(self, q: Any, reader: Any, first_owner: int) -> None:
        """Get, check and commit until the parent says every producer is done and nothing is
        left.  Each delivery notes whether it may have come from the first owner (killed with
        ``--kill-owner``: its open and not yet checkpointed reads are delivered again)."""
        first_id = self.run.ledger.first_id
        while True:
            before = owner_pid(q)
            try:
                item = reader.get(timeout=0.05)
                got_at = time.monotonic()
            except Empty:
                self.timeouts += 1
                if self.done.is_set():
                    return
                continue
            except QueueClosed:
                return
            self.gets += 1
            if item.id < first_id:
                self.leftovers += 1  # an earlier run's item in a reused --dir: not validated
            else:
                try:
                    p, s = check_payload(item.data)
                    self.log.append((item.id, p, s, item.error_count, int(before == first_owner)))
                except ValueError as exc:
                    self.run.ledger.note_bad_payload(f"item {item.id}: {exc}")
            if self.run.keycheck is not None and item.key is not None:  # released before the commit
                self.keylog.append((got_at, time.monotonic(), item.key.decode("latin-1"), item.id))
            try:
                reader.commit(item)
            except OwnerLost:
                self.commits_refused += 1  # opened under an owner that died: delivered again

    def ticker(self) -> None:
        while not self.leave.wait(TICK):
            self.emit(f"N {sum(self.run.put_count)} {self.gets}")

    def main(self) -> int:
        args, run = self.args, self.run
        threading.Thread(target=self.commands, daemon=True).start()
        q: Any = run.open()  # a client: the owner process holds the directory
        reader = q.reader(READER, run.reader_config)
        first_owner = int(self.plan["owner_pid"])
        self.emit(f"R {owner_pid(q)}")
        self.go.wait()
        if args.seconds:
            cap = threading.Timer(args.seconds, run.stop_producing.set)
            cap.daemon = True
            cap.start()
        w = args.writers
        producers = [
            run.start(self.guarded, "producer", run.produce, q, p, int(self.plan["per"]))
            for p in range(self.index * w, self.index * w + w)
        ]
        consumer = run.start(self.guarded, "consumer", self.consume, q, reader, first_owner)
        threading.Thread(target=self.ticker, daemon=True).start()
        join_all(producers)
        self.emit("P")
        consumer.join()
        self.puts_retried = int(getattr(q, "puts_retried", 0))  # 0 once this process owns it
        self.write_ledger(bool(q.is_owner))
        self.emit(f"E {int(bool(q.is_owner))}")
        self.leave.wait()
        run.stop_producing.set()
        q.close()
        return 0

    def write_ledger(self, is_owner: bool) -> None:
        led = self.run.ledger
        data = {
            "produced": led.produced,
            "put_bytes": led.put_bytes,
            "latencies": led.latencies,
            "unknown": {p: sorted(s) for p, s in led.unknown.items()},
            "log": self.log,
            "keylog": self.keylog,
            "bad_payloads": led.bad_payloads,
            "failures": led.failures,
            "gets": self.gets,
            "timeouts": self.timeouts,
            "leftovers": self.leftovers,
            "commits_refused": self.commits_refused,
            "is_owner": is_owner,
            "pid": os.getpid(),
            "puts_retried": self.puts_retried,
        }
        path = os.path.join(self.plan["ledgers"], f"ledger-{self.index}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(data, f)
        os.replace(path + ".tmp", path)


def owner_pid(q: Any) -> int:
    """The pid of the process serving ``q`` now (this one if it owns the queue)."""
    try:
        return int(q.owner_pid) if not q.is_owner else os.getpid()
    except (AttributeError, TypeError):
        return -1


def owner_main(plan: dict[str, Any]) -> int:
    """Own the queue (nobody else holds it yet) and serve it until told to close."""
    run = Run(plan_args(plan))
    q = run.open()
    if not q.is_owner:
        raise OSError(f"{run.directory} is already owned by another process")
    q.reader(READER, run.reader_config)
    os.write(1, f"R {os.getpid()}\n".encode())
    for line in sys.stdin:
        if line.strip() == "exit":
            break
    q.close()
    os.write(1, f"F {q.fsync_count}\n".encode())
    return 0


def main(argv: list[str]) -> int:
    """``owner PLAN`` or ``worker PLAN K``."""
    # Ctrl-C in a terminal reaches the whole process group: the parent ends its children itself
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    role, plan_path = argv[0], argv[1]
    with open(plan_path) as f:
        plan = json.load(f)
    try:
        if role == "owner":
            return owner_main(plan)
        return Worker(plan, int(argv[2])).main()
    except (JournaledError, OSError):
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
