"""``journaled qtest crash``: the core promise, proved across real crashes.

A child process (cli/qtest/crash_worker.py) owns a queue, puts and consumes; this parent kills it
with SIGKILL after a random delay, or lets it kill itself at a named point (just before or after
the Nth write, fsync or rename inside the library), restarts it, and after the last cycle drains
every reader itself.  Checked: every acknowledged put delivered to both readers, no corrupt
delivery, ids in order within each life and acknowledged put order equal to id order, nothing a
later checkpoint covered delivered again, and every restart opening and putting successfully.
With ``--key-order`` (cli/qtest/keys.py) reader ``c`` has competing consumers and, instead of
ids in order within a life: no key with two items open at once, each key's ids in order within a
life, and across lives (replay, not loss) no item delivered after a later item of its key had
started its commit while it had not (:meth:`Tally.keyed`).
``scripts/crash_soak`` runs the same machinery for long soaks.
"""

from __future__ import annotations

import importlib
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import attrs

from journaled.cli.qtest.crash_worker import QUEUE, Forked, check_payload, worker_options
from journaled.cli.qtest.disk import directory_bytes
from journaled.config import QueueConfig
from journaled.errors import Empty
from journaled.queue import JournaledQueue

#: The result keys that must be zero for a run to pass.
BROKEN_PROMISES = (
    "lost",
    "corrupt",
    "order_violations",
    "key_concurrent",
    "redelivered_beyond_allowance",
    "failed_restarts",
)


@attrs.frozen
class CrashPlan:
    """What a crash run does: ``mode`` is the worker's sync (always, periodic, never, mixed)."""

    cycles: int = 10
    seed: int = 1
    mode: str = "mixed"
    min_life: float = 0.02
    max_life: float = 0.4
    named: float = 0.3  # fraction of lives killed at a named I/O point
    timeout: float = 60.0  # seconds a worker may take to open the queue
    directory: str | None = None  # None: a fresh temporary directory, removed afterwards
    keep: bool = False
    fork: bool = True  # fork the worker (fast) rather than start a fresh interpreter
    compression: str | None = None  # the queue's, as QueueConfig takes it
    keys: int = 0  # items keyed with one of this many keys (0: none)
    key_order: bool = False  # reader c keeps order per key, with competing consumers


class Tally:
    """What the parent learned from the workers' events, over every life."""

    def __init__(self, key_order: bool = False) -> None:
        self.key_order = key_order
        # An item a consumer got may be lost in the kill if its put was never acknowledged, and
        # its id given to a later put: items are (id, seq) here, and only an acknowledged one
        # (stored for good) can show that its key's order was passed.
        self.key_of: dict[int, tuple[str, int]] = {}  # id -> (key, seq) of its latest delivery
        self.commit_started: set[tuple[int, int]] = set()  # (id, seq) whose C was seen
        self.latest_started: dict[str, int] = {}  # key -> highest acknowledged id whose commit started
        self.key_concurrent = 0
        self.acked: dict[int, int] = {}  # id -> seq
        self.committed: set[int] = set()
        self.covered: set[int] = set()  # committed and then checkpointed
        self.pending_commit: set[int] = set()
        self.cycles = 0
        self.kill_points = 0
        self.corrupt = 0
        self.order = 0
        self.redelivered = 0
        self.redelivered_beyond = 0
        self.failed_restarts = 0
        self.lost = 0
        self.puts_started = 0
        self.gets = 0
        self.errors: list[str] = []
        self.max_seq = 0
        self.got_seq: dict[int, int] = {}

    def event(self, parts: list[str], life: dict[str, Any]) -> None:
        """Account one event line of the worker (``life`` holds this life's state)."""
        ev = parts[0]
        if ev == "R":
            life["ready_at"] = time.monotonic()
        elif ev == "P":
            self.puts_started += 1
            self.max_seq = max(self.max_seq, int(parts[1]))
        elif ev == "A":
            seq, i = int(parts[1]), int(parts[2])
            if i in self.acked and self.acked[i] != seq:
                self.corrupt += 1
                self.errors.append(f"id {i} acked for seq {self.acked[i]} and {seq}")
            self.acked[i] = seq
            self.started_and_acked(i)
        elif ev == "G":
            i, seq, ok = int(parts[1]), int(parts[2]), parts[3] == "1"
            self.gets += 1
            if not ok or (i in self.acked and self.acked[i] != seq):
                self.corrupt += 1
                self.errors.append(f"corrupt delivery id={i} seq={seq} ok={ok}")
            if len(parts) > 4:
                self.keyed(i, seq, parts[4], life)
            elif not self.key_order and i <= life["last_got"]:  # competing consumers: per key only
                self.order += 1
                self.errors.append(f"order: {i} after {life['last_got']}")
            life["last_got"] = i
            if i in self.committed:
                self.redelivered += 1
                if i in self.covered:
                    self.redelivered_beyond += 1
                    self.errors.append(
                        f"id {i} (seq {seq}, first delivered as seq {self.got_seq.get(i)}) "
                        "redelivered although checkpointed"
                    )
            self.got_seq.setdefault(i, seq)
        elif ev == "C":
            i = int(parts[1])
            if i in self.key_of:
                key, seq = self.key_of[i]
                life.setdefault("open", {}).pop(key, None)  # unmarked before the commit call
                self.commit_started.add((i, seq))
                self.started_and_acked(i)
        elif ev == "D":
            self.committed.add(int(parts[1]))
            self.pending_commit.add(int(parts[1]))
        elif ev == "S":  # a checkpoint starts: it covers the commits done before this point
            life.setdefault("checkpoints", []).append(set(self.pending_commit))
        elif ev == "K":
            started = life.get("checkpoints")
            if started:  # competing consumers checkpoint at once: the oldest start covers least
                self.covered |= started.pop(0)
            else:
                self.covered |= self.pending_commit
                self.pending_commit = set()

    def started_and_acked(self, i: int) -> None:
        """Id ``i``'s commit started and its put is acknowledged (either order): from now on no
        earlier item of its key may be delivered for the first time."""
        key, seq = self.key_of.get(i, ("", -1))
        if (i, seq) in self.commit_started and self.acked.get(i) == seq:
            self.latest_started[key] = max(self.latest_started.get(key, 0), i)

    def keyed(self, i: int, seq: int, key: str, life: dict[str, Any]) -> None:
        """Delivery of id ``i`` with ``key``: under key order, no other item of the key open in
        this life, ids of the key in order within the life, and across lives nothing delivered
        that a later item of its key already passed (that item's commit started before this
        one's ever did: order was lost, not replayed)."""
        self.key_of[i] = (key, seq)
        if not self.key_order:
            return
        held, last = life.setdefault("open", {}), life.setdefault("last_of_key", {})
        if key in held:
            self.key_concurrent += 1
            self.errors.append(f"key {key}: id {i} delivered while id {held[key]} was open")
        if i < last.get(key, 0):
            self.order += 1
            self.errors.append(f"key {key}: id {i} delivered after id {last[key]} in one life")
        self.passed(i, seq, key, "")
        held[key] = i
        last[key] = i

    def passed(self, i: int, seq: int, key: str, where: str) -> None:
        """Count id ``i`` (put ``seq``) of ``key`` delivered, its commit never started, after a
        later acknowledged item of its key started its commit."""
        if (i, seq) not in self.commit_started and i < self.latest_started.get(key, 0):
            self.order += 1
            self.errors.append(
                f"key {key}: id {i} delivered{where} after id {self.latest_started[key]} "
                "of its key was committed"
            )


def run_life(
    path: str,
    mode: str,
    seed: int,
    tally: Tally,
    kill_after: float,
    kill_at: str,
    timeout: float,
    fork: bool,
    name: str = QUEUE,
    stop: threading.Event | None = None,
    options: str = "-",
) -> None:
    """Start one worker, kill it after ``kill_after`` seconds of being ready, account its events.
    The worker never outlives this call, even when it is interrupted."""
    proc: Forked | subprocess.Popen[bytes]
    if fork:
        proc = Forked(path, mode, seed, tally.max_seq + 1, kill_at, name, options)
        fd = proc.fd
    else:
        cmd = [
            sys.executable,
            "-m",
            "journaled.cli.qtest.crash_worker",
            path,
            mode,
            str(seed),
            str(tally.max_seq + 1),
            kill_at,
            name,
            options,
        ]
        # the child imports this very package, wherever it was imported from
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (here, os.environ.get("PYTHONPATH")))))
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
    buf = b""
    life: dict[str, Any] = {"ready_at": None, "last_got": 0}
    start = time.monotonic()
    killed = False
    tally.pending_commit = set()  # commits of the last life that no checkpoint covered died with it
    try:
        while True:
            if stop is not None and stop.is_set():
                raise KeyboardInterrupt  # a Ctrl-C whose exception was swallowed (in a __del__, say)
            now = time.monotonic()
            ready_at = life["ready_at"]
            if ready_at is not None and not killed and now - ready_at >= kill_after:
                proc.send_signal(signal.SIGKILL)
                killed = True
            if ready_at is None and not killed and now - start > timeout:
                proc.kill()
                killed = True
                tally.failed_restarts += 1
                tally.errors.append("worker did not open the queue in time")
            r, _, _ = select.select([fd], [], [], 0.02)
            if isinstance(proc, Forked):
                proc.drain_stderr()  # recovery warnings must never fill the pipe and stall the worker
            if not r:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break  # the worker is gone (its end of the pipe closed)
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                parts = line.decode().split()
                if parts:
                    tally.event(parts, life)
    finally:
        if proc.returncode is None:
            proc.kill()  # interrupted: never leave a worker holding the queue
        proc.wait()
    if isinstance(proc, Forked):
        err = proc.stderr_text()
    else:
        err = proc.stderr.read().decode() if proc.stderr else ""
    ready_at = life["ready_at"]
    if ready_at is None and kill_at and proc.returncode == -signal.SIGKILL:
        tally.kill_points += 1  # killed itself at a named point while opening: legitimate
    elif ready_at is None:
        tally.failed_restarts += 1
        tally.errors.append(f"worker never became ready (rc={proc.returncode}): {err[-500:]}")
    elif proc.returncode != -signal.SIGKILL:
        tally.failed_restarts += 1
        tally.errors.append(f"worker exited rc={proc.returncode}: {err[-500:]}")
    if kill_at and ready_at is not None:
        tally.kill_points += 1
    tally.cycles += 1


def final_check(path: str, tally: Tally, name: str = QUEUE) -> dict[str, int]:
    """Open the queue in this process and drain both readers: count what was lost or broken."""
    with JournaledQueue(path, QueueConfig(sync="always"), name=name) as q:
        report = q.recovery_report
        disk = directory_bytes(path)  # before the drain lets files be archived
        results: dict[str, set[int]] = {}
        for reader in ("c", "fan"):
            r = q.reader(reader)
            got: list[int] = []
            while True:
                try:
                    it = r.get(block=False)
                except Empty:
                    break
                s, ok = check_payload(it.data)
                if not ok or (it.id in tally.acked and tally.acked[it.id] != s):
                    tally.corrupt += 1
                    tally.errors.append(f"final drain {reader}: corrupt id {it.id}")
                if got and it.id <= got[-1]:
                    tally.order += 1
                if reader == "c" and it.key is not None and tally.key_order:
                    tally.passed(it.id, s, it.key.decode("latin-1"), " in the final drain")
                if reader == "c" and it.id in tally.covered:
                    tally.redelivered_beyond += 1
                    tally.errors.append(f"final drain: id {it.id} redelivered although checkpointed")
                got.append(it.id)
                r.commit(it)
            results[reader] = set(got)
        for i in tally.acked:
            if i not in tally.committed and i not in results["c"]:
                tally.lost += 1
                tally.errors.append(f"acked id {i} lost for reader c")
            if i not in results["fan"]:
                tally.lost += 1
                tally.errors.append(f"acked id {i} lost for reader fan")
        by_seq = sorted((s, i) for i, s in tally.acked.items())  # acknowledged put order = id order
        for (s1, i1), (s2, i2) in zip(by_seq, by_seq[1:]):
            if i2 <= i1:
                tally.order += 1
                tally.errors.append(f"ack order: seq {s1}->{i1}, seq {s2}->{i2}")
        damaged = sum(1 for e in report if e.action != "truncated-tail")
    return {"recovery_events_not_torn_tail": damaged, "disk_bytes_at_end": disk}


def _bar(total: int, show: bool) -> Any:
    if not show or not sys.stderr.isatty():
        return None
    try:  # optional, as for the other tests
        return importlib.import_module("tqdm").tqdm(total=total, desc="crash", unit=" kills", leave=False)
    except ImportError:
        return None


def soak(plan: CrashPlan, progress: bool = False) -> dict[str, Any]:
    """Run ``plan``; return the figures (``ok`` when no promise was broken).  Ctrl-C ends the
    current life, skips the final drain and returns what was seen, with ``interrupted``."""
    rng = random.Random(plan.seed)
    temp = plan.directory is None
    base = tempfile.mkdtemp(prefix="qtest-crash-") if temp else str(plan.directory)
    path = os.path.join(base, "q") if temp else base
    tally = Tally(key_order=plan.key_order)
    options = worker_options(plan.compression, plan.keys, plan.key_order)
    t0 = time.monotonic()
    extra: dict[str, int] = {}
    interrupted = False
    bar = _bar(plan.cycles, progress)
    # Ctrl-C raises KeyboardInterrupt wherever the main thread is; if that happens inside a
    # finalizer (a Popen's __del__) Python only prints it, so the flag makes it stick.
    stop = threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():

        def on_sigint(signum: int, frame: Any) -> None:
            stop.set()
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        for _cycle in range(plan.cycles):
            if stop.is_set():
                raise KeyboardInterrupt
            mode = plan.mode if plan.mode != "mixed" else rng.choice(("always", "periodic", "never"))
            kill_at = ""
            if rng.random() < plan.named:
                kind = rng.choice(("write", "fsync", "rename"))
                kill_at = f"{kind}:{rng.randint(1, 30)}:{rng.choice(('before', 'after'))}"
            life = rng.uniform(plan.min_life, plan.max_life)
            run_life(
                path,
                mode,
                rng.randrange(1 << 30),
                tally,
                life,
                kill_at,
                plan.timeout,
                plan.fork,
                stop=stop,
                options=options,
            )
            if bar is not None:
                bar.update(1)
        extra = final_check(path, tally)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        if bar is not None:
            bar.close()
        if temp and not plan.keep:
            shutil.rmtree(base, ignore_errors=True)
    result: dict[str, Any] = {
        "test": "crash",
        "seed": plan.seed,
        "mode": plan.mode,
        "kill_cycles": tally.cycles,
        "named_kill_points": tally.kill_points,
        "puts_started": tally.puts_started,
        "puts_acked": len(tally.acked),
        "gets": tally.gets,
        "committed": len(tally.committed),
        "lost": tally.lost,
        "corrupt": tally.corrupt,
        "order_violations": tally.order,
        "key_concurrent": tally.key_concurrent,
        "compression": plan.compression,
        "keys": plan.keys,
        "key_order": plan.key_order,
        "redelivered_within_allowance": tally.redelivered - tally.redelivered_beyond,
        "redelivered_beyond_allowance": tally.redelivered_beyond,
        "failed_restarts": tally.failed_restarts,
        "seconds": round(time.monotonic() - t0, 1),
        **extra,
        "errors": tally.errors[:20],
        "interrupted": interrupted,
        "dir": path,
        "dir_kept": not temp or plan.keep,
    }
    result["ok"] = not any(result[k] for k in BROKEN_PROMISES)
    return result


def format_crash(r: dict[str, Any]) -> str:
    """The one-screen, human summary of a crash run."""
    modes = f"sync {r['mode']}"
    if r["mode"] == "mixed":
        modes = "fsync mixed per life (always, every 20 ms, never)"
    lines = [
        f"qtest crash: a child process putting and consuming, killed with SIGKILL {r['kill_cycles']} "
        f"times ({r['named_kill_points']} at a write, fsync or rename), {modes}",
        f"  puts  {r['puts_acked']:,} acknowledged of {r['puts_started']:,} started; "
        f"{r['gets']:,} deliveries, {r['committed']:,} committed; {r['seconds']} s",
        f"  redelivered after a crash (allowed: committed but not yet checkpointed): "
        f"{r['redelivered_within_allowance']:,}",
    ]
    if r.get("keys") or r.get("compression"):
        disk = r.get("disk_bytes_at_end")
        lines.append(
            f"  compression {r.get('compression') or 'none'}; keys {r.get('keys') or 'none'}; key order "
            f"{'on (3 competing consumers of reader c)' if r.get('key_order') else 'off'}"
            + (f"; {disk / 1e3:,.1f} kB on disk before the final drain" if disk is not None else "")
        )
    if r["interrupted"]:
        lines.append(f"  interrupted after {r['kill_cycles']} cycles: final drain skipped; partial figures")
    if r["ok"] and not r["gets"]:
        why = "interrupted before any delivery" if r["interrupted"] else "no delivery to check"
        lines.append(f"  validation: NOTHING CHECKED ({why}; 0 deliveries)")
    elif r["ok"] and r["interrupted"]:
        lines.append(
            f"  validation: PARTIAL (checked: the {r['gets']:,} deliveries so far, intact, in order, "
            "nothing checkpointed redelivered, every restart opened; not checked: that every "
            "acknowledged put reached both readers, which the skipped final drain proves)"
        )
    elif r["ok"]:
        lines.append(
            "  validation: OK (every acknowledged put delivered to both readers, intact, "
            "in order; nothing checkpointed redelivered; every restart opened)"
        )
        if r.get("key_order"):
            lines.append(
                "  key order: OK (no key with two items open at once; each key's ids in order within "
                "each life and across restarts: replayed, never passed by a later item of the key)"
            )
    else:
        broken = ", ".join(f"{k.replace('_', ' ')} {r[k]}" for k in BROKEN_PROMISES if r.get(k))
        lines.append(f"  validation: FAILED ({broken})")
        lines.extend(f"    - {e}" for e in r["errors"][:10])
    lines.append(f"  queue directory: {r['dir']} ({'kept' if r['dir_kept'] else 'removed'})")
    return "\n".join(lines)
