"""``journaled qtest put --processes N [--kill-owner]``: producers and consumers in N processes.

The parent (this module) creates the queue and its reader ``qtest``, starts an owner process
that holds the queue and serves it, then N worker processes (cli/qtest/procs_worker.py): each a
client of the owner, with ``--writers`` producer threads and one consumer thread.  Each worker
writes its ledger (what it put and what it got) to a file; after the workers and the owner have
closed the queue, the parent drains what is left and checks the merged ledgers with
:meth:`~journaled.cli.qtest.run.Observations.validate`: every acknowledged put delivered exactly once,
intact, in per-producer order.

With ``--kill-owner`` the parent kills the owner with SIGKILL once a random 25-75 % (chosen by
``--seed``) of the puts are acknowledged; the workers take the queue over by themselves
(remote/clientqueue.py's failover), and a put in flight is made again with its producer tag on
the next owner: it must be stored exactly once, and a put that still raises ``OwnerLost`` with
``outcome_unknown`` is an error of the run.  A read the dead owner had handed out, open or
committed but not yet checkpointed, is delivered once more: counted as redelivered (same id).
One put stored under two ids (``stored_twice``) is always an error.
"""

from __future__ import annotations

import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Any

from journaled.cli.inspection import UsageError
from journaled.cli.qtest.keys import check_intervals
from journaled.cli.qtest.procs_worker import READER
from journaled.cli.qtest.run import Run

#: seconds a child may take to start, or the run may go without any progress, before failing
STALL = 60.0
OWNER = -1  # the owner process's index among the children (workers are 0..N-1)


class Failed(Exception):
    """A child process broke the run (died, hung, reported an error): the message says which."""


class Child:
    """A child process whose stdout lines reach ``events`` as ``(index, line)`` (None at EOF)."""

    def __init__(self, index: int, argv: list[str], stderr_path: str, events: queue.Queue[Any]) -> None:
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (here, os.environ.get("PYTHONPATH")))))
        self.index, self.stderr_path = index, stderr_path
        with open(stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "journaled.cli.qtest.procs_worker", *argv],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
            )
        self.pid = self.proc.pid
        self.thread = threading.Thread(target=self._collect, args=(events,), daemon=True)
        self.thread.start()

    def _collect(self, events: queue.Queue[Any]) -> None:
        out: IO[bytes] | None = self.proc.stdout
        assert out is not None
        for line in out:
            events.put((self.index, line.decode().strip()))
        events.put((self.index, None))

    def send(self, line: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write((line + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it is gone: its end of file is reported by _collect

    def stderr_tail(self) -> str:
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read()[-600:].decode(errors="replace").strip()
        except OSError:
            return ""

    def finish(self, timeout: float = STALL) -> int:
        """Wait for the child to end (it was told to); kill it if it does not."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.thread.join(timeout)
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


class Conductor:
    """The parent's side of one ``--processes`` run."""

    def __init__(self, run: Run) -> None:
        self.run, self.args = run, run.args
        self.n = int(self.args.processes)
        self.per = max(1, self.args.items // (self.args.writers * self.n))
        self.events: queue.Queue[tuple[int, str | None]] = queue.Queue()
        self.ledgers = tempfile.mkdtemp(prefix="qtest-procs-")
        rng = random.Random(self.args.seed)
        self.kill_fraction = rng.uniform(0.25, 0.75)
        self.children: dict[int, Child] = {}
        self.ready: dict[int, int] = {}  # index -> the owner pid it reported
        self.produced: set[int] = set()
        self.finished: dict[int, bool] = {}  # index -> whether it owned the queue then
        self.gets = [0] * self.n
        self.run.count_producers(self.n)  # the progress bar's figures
        self.fsyncs: int | None = None
        self.t0 = 0.0
        self.killed: dict[str, Any] | None = None
        self.last_change = time.monotonic()
        self.last_progress: dict[int, str] = {}

    # ------------------------------------------------------------------ children
    def spawn(self, index: int, *argv: str) -> None:
        name = "owner" if index == OWNER else f"worker-{index}"
        err = os.path.join(self.ledgers, f"{name}.err")
        self.children[index] = Child(index, list(argv), err, self.events)

    def handle(self, index: int, line: str | None) -> None:
        """Account one line of a child (None: its output ended)."""
        if line is None or not line.startswith("N ") or line != self.last_progress.get(index):
            self.last_change = time.monotonic()  # a progress line saying nothing new is no progress
        who = "the owner process" if index == OWNER else f"worker {index}"
        if line is None:
            if index == OWNER and self.killed is not None:
                return
            if index == OWNER or index not in self.finished:
                child = self.children[index]
                raise Failed(f"{who} (pid {child.pid}) ended early: {child.stderr_tail() or 'no message'}")
            return
        word, *rest = line.split()
        if word == "N":
            self.last_progress[index] = line
            self.run.note_puts(index, int(rest[0]))
            self.gets[index] = int(rest[1])
        elif word == "R":
            self.ready[index] = int(rest[0])
        elif word == "P":
            self.produced.add(index)
        elif word == "E":
            self.finished[index] = rest[0] == "1"
        elif word == "F":
            self.fsyncs = int(rest[0])

    def wait_until(self, done: Any, what: str) -> None:
        """Handle lines until ``done()``; a stall of STALL seconds is a failure."""
        while not done():
            try:
                index, line = self.events.get(timeout=0.02)
                self.handle(index, line)
            except queue.Empty:
                if time.monotonic() - self.last_change > STALL:
                    raise Failed(f"no progress for {STALL:g} s while waiting for {what}") from None
            self.maybe_kill()

    def maybe_kill(self) -> None:
        """``--kill-owner``: SIGKILL the owner once the chosen share of puts is acknowledged (or
        every producer is done, or the chosen share of a ``--seconds`` cap has passed)."""
        if not self.args.kill_owner or self.killed is not None or not self.t0:
            return
        puts = sum(self.run.put_count)
        elapsed = time.monotonic() - self.t0
        share = self.args.seconds and elapsed >= self.kill_fraction * self.args.seconds
        if (
            puts < self.kill_fraction * self.per * self.args.writers * self.n
            and not share
            and len(self.produced) < self.n
        ):
            return
        owner = self.children[OWNER]
        owner.proc.send_signal(signal.SIGKILL)
        owner.proc.wait()
        self.killed = {
            "pid": owner.pid,
            "after_puts": puts,
            "at_seconds": round(elapsed, 3),
            "producers_done": len(self.produced) == self.n,
        }

    # ------------------------------------------------------------------ the run
    def conduct(self) -> tuple[float, float]:
        """Start everyone, let them work, end them in order; returns (put, get) seconds."""
        args, run = self.args, self.run
        with run.open() as q:  # the reader exists before the first put; ledger.first_id is set
            if not q.is_owner:
                raise UsageError(
                    f"{run.directory} is held by another process: --processes needs a "
                    "queue directory nobody else has open"
                )
            q.reader(READER, run.reader_config)
        plain = (int, float, str, tuple, type(None))
        plan = {
            "args": {k: v for k, v in vars(args).items() if isinstance(v, plain)},
            "directory": run.directory,
            "first_id": run.ledger.first_id,
            "ledgers": self.ledgers,
            "per": self.per,
            "owner_pid": 0,
        }
        plan_path = os.path.join(self.ledgers, "plan.json")
        self.write_plan(plan_path, plan)
        self.spawn(OWNER, "owner", plan_path)
        self.wait_until(lambda: OWNER in self.ready, "the owner process to open the queue")
        plan["owner_pid"] = self.children[OWNER].pid
        self.write_plan(plan_path, plan)
        for k in range(self.n):
            self.spawn(k, "worker", plan_path, str(k))
        self.wait_until(lambda: len(self.ready) == self.n + 1, "the workers to connect")
        with run.progress(self.per * args.writers * self.n):
            self.t0 = time.monotonic()
            for k in range(self.n):
                self.children[k].send("go")
            self.wait_until(lambda: len(self.produced) == self.n, "the producers")
            put_s = time.monotonic() - self.t0
            self.maybe_kill()  # still alive after the last put: kill it while consumers drain
            for k in range(self.n):
                self.children[k].send("done")
            self.wait_until(lambda: len(self.finished) == self.n, "the consumers")
            get_s = time.monotonic() - self.t0
        for k in range(self.n):  # every read is settled: the order of leaving does not matter
            self.children[k].send("exit")
        for k in range(self.n):
            if self.children[k].finish() != 0:
                raise Failed(
                    f"worker {k} exited with {self.children[k].proc.returncode}: "
                    f"{self.children[k].stderr_tail()}"
                )
        if self.killed is None:
            self.children[OWNER].send("exit")
            if self.children[OWNER].finish() != 0:
                raise Failed(f"the owner process failed to close: {self.children[OWNER].stderr_tail()}")
            while not self.events.empty():
                index, line = self.events.get()
                if line is not None and line.startswith("F"):
                    self.handle(index, line)
        return put_s, get_s

    @staticmethod
    def write_plan(path: str, plan: dict[str, Any]) -> None:
        with open(path + ".tmp", "w") as f:
            json.dump(plan, f)
        os.replace(path + ".tmp", path)

    def merge(self) -> tuple[set[tuple[int, int]], dict[str, Any]]:
        """Fold the workers' ledgers into the run's; returns the (producer, seq) delivered by the
        first owner at least once, and the workers' other figures."""
        ledger = self.run.ledger
        pre: set[tuple[int, int]] = set()
        figures: dict[str, Any] = {"commits_refused": 0, "owner_after": None, "puts_retried": 0}
        keylog: list[tuple[float, float, bytes, int]] = []
        for k in range(self.n):
            with open(os.path.join(self.ledgers, f"ledger-{k}.json")) as f:
                data = json.load(f)
            keylog.extend((g, r, key.encode("latin-1"), i) for g, r, key, i in data.get("keylog", ()))
            pre.update((p, s) for _i, p, s, _e, first in ledger.absorb(READER, data) if first)
            figures["commits_refused"] += data["commits_refused"]
            figures["puts_retried"] += data.get("puts_retried", 0)
            if data["is_owner"]:
                figures["owner_after"] = {"worker": k, "pid": data["pid"]}
        if self.run.keycheck is not None and self.killed is not None:
            # a read the killed owner handed out comes back while its first holder still "holds"
            # it: the overlap is the allowed redelivery, not a broken key order
            figures["key_order_not_checked"] = (
                "the workers' deliveries (--kill-owner: reads of the killed owner are "
                "redelivered, so overlaps are allowed); the final drain only"
            )
        elif self.run.keycheck is not None:
            check_intervals(READER, keylog, self.run.keycheck)
        return pre, figures

    def stop_all(self) -> None:
        for child in self.children.values():
            child.kill()


def run_processes(run: Run) -> tuple[dict[str, Any], int | None, list[str], bool]:
    """Run ``put --processes N``; returns (result fields, the owner's fsync rounds or None,
    validation errors, interrupted)."""
    c = Conductor(run)
    ledger = run.ledger
    interrupted = False
    problems: list[str] = []
    put_s = get_s = 0.0
    gets: int | None = None  # the workers' progress counts, when their ledgers never came
    extra: dict[str, Any] = {}
    try:
        try:
            with run.disk:
                put_s, get_s = c.conduct()
        except KeyboardInterrupt:
            interrupted = True
        except Failed as exc:
            problems.append(str(exc))
        finally:
            c.stop_all()
        if interrupted or problems:
            ledger.produced_figures(run.put_count)
            took = time.monotonic() - c.t0 if c.t0 else 0.0
            put_s, get_s = put_s or took, get_s or took
            errors = problems
            # the workers report bytes, latencies and deliveries in their ledgers at the end:
            # stopped first, they never did; the counts of their progress lines are all there is
            extra["not_measured"] = "bytes, latencies: the workers were stopped before they reported them"
            gets = sum(c.gets)
        else:
            pre, figures = c.merge()
            with run.open() as q:  # what nobody took: reads given back when the owner died
                extra["final_drain"] = run.drain(q.reader(READER, run.reader_config))
            errors = ledger.validate(
                # key order lets a consumer pass an item whose key is busy: per-consumer
                # order is then not a promise (key order, checked below, is)
                ordered_logs=run.keycheck is None,
                may_redeliver=pre.__contains__ if c.killed is not None else None,
            )
            if run.keycheck is not None:
                errors.extend(run.keycheck.errors())
            if c.killed is None and (ledger.unknown or figures["commits_refused"]):
                errors.append("a put with an unknown outcome, or a refused commit, though no owner died")
            if c.killed is not None and ledger.unknown:
                errors.append(
                    "a put raised OwnerLost(outcome_unknown) though a client makes a put whose "
                    "owner died again on the next owner"
                )
            if c.killed is not None and figures["owner_after"] is None:
                errors.append("the owner was killed but no worker took the queue over")
            extra.update(figures)
    finally:
        if run.args.keep:
            extra["ledgers_dir"] = c.ledgers  # the workers' ledgers and error output, kept
        else:
            shutil.rmtree(c.ledgers, ignore_errors=True)
    unknown = sum(len(s) for s in ledger.unknown.values())
    extra.update(
        {
            "put_seconds": put_s,
            "get_seconds": get_s,
            "gets": ledger.delivered() if gets is None else gets,
            "processes": c.n,
            "owner_pid": c.children[OWNER].pid if OWNER in c.children else None,
            "owner_killed": c.killed,
            "lost_acknowledged": ledger.missing,
            "stored_twice": ledger.stored_twice,
            "outcome_unknown": unknown,
            "outcome_unknown_delivered": ledger.unknown_delivered,
            "redelivered": ledger.redelivered,
        }
    )
    return extra, c.fsyncs, errors, interrupted


def process_lines(r: dict[str, Any]) -> list[str]:
    """The summary lines of a ``--processes`` run (after the put and get figures)."""
    left = f"; {r['final_drain']:,} items left for the final drain" if r.get("final_drain") else ""
    owner = f"1 owner process (pid {r['owner_pid']})"
    lines = [f"  processes: {r['processes']} workers (clients) + {owner}{left}"]
    killed = r["owner_killed"]
    if killed is not None:
        when = "after every put" if killed["producers_done"] else f"after {killed['after_puts']:,} puts"
        after = r.get("owner_after")
        heir = f"worker {after['worker']} (pid {after['pid']}) took over" if after else "nobody took over"
        lines.append(
            f"  owner pid {killed['pid']} killed with SIGKILL {when} ({killed['at_seconds']:.2f} s "
            f"in); {heir}"
        )
        lines.append(
            f"  lost acknowledged puts {r['lost_acknowledged']:,}; stored twice "
            f"{r['stored_twice']:,}; outcome unknown (OwnerLost) "
            f"{r['outcome_unknown']:,}, of which delivered {r['outcome_unknown_delivered']:,}; "
            f"redelivered after the kill (allowed) {r['redelivered']:,}; commits refused "
            f"{r.get('commits_refused', 0):,}; puts made again on the next owner "
            f"{r.get('puts_retried', 0):,}"
        )
    return lines
