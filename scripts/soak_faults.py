#!/usr/bin/env python3
"""Faults that last: what an open queue costs while a fault persists and nothing else happens.

Each scenario runs in a child process (this script with ``--child``), which opens a queue with
``sync=0.05`` and one reader, makes the fault happen for real, then stays idle for ``--idle``
seconds and reports what its background thread did meanwhile: log records emitted, CPU time used
(``resource.getrusage`` of the child, every thread), and whether a put after the fault raises.

Scenarios:

* ``diskfull``: the queue lives on a 1 MiB tmpfs and puts 4 KiB items until the disk is full and
  the queue is poisoned (``JournalIOError``, ENOSPC).  Needs root to mount the tmpfs (or
  ``--dir`` naming a directory on a small file system you made).
* ``fsize``: the same without root: the child lowers ``RLIMIT_FSIZE`` to 256 KiB and ignores
  ``SIGXFSZ``, so the journal's write fails with EFBIG.
* ``rmdir``: the queue directory is removed (``rm -rf``) under the live queue.

    python scripts/soak_faults.py                       # every scenario that can run here
    python scripts/soak_faults.py --scenario rmdir --idle 5 --json
    PYTHONPATH=/path/to/other/checkout python scripts/soak_faults.py   # measure another version

The figures in the CHANGELOG/closing note come from this script: compare before and after on the
same machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

SCENARIOS = ("diskfull", "fsize", "rmdir")


# ----------------------------------------------------------------------------------- the child
class _Counter(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def child(scenario: str, directory: str, idle: float) -> dict[str, object]:
    from journaled import JournaledQueue, JournalIOError, QueueConfig

    counter = _Counter()
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(asctime)s %(message)s")
    logging.getLogger().addHandler(counter)
    if scenario == "fsize":
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, resource.RLIM_INFINITY))
    qpath = os.path.join(directory, "q")
    q = JournaledQueue(qpath, QueueConfig(sync=0.05, checkpoint_interval=0.2))
    r = q.reader("r")
    fault: BaseException | None = None
    puts = 0
    if scenario in ("diskfull", "fsize"):
        try:
            for _ in range(100_000):
                q.put(os.urandom(4096))
                puts += 1
                it = r.get(block=False)
                r.commit(it)  # keeps the reader's checkpoint busy
        except JournalIOError as exc:
            fault = exc
    else:
        for _ in range(50):
            q.put(b"x" * 100)
            r.commit(r.get(block=False))
            puts += 1
        q.sync()
        time.sleep(0.3)
        shutil.rmtree(qpath)
        try:  # the reader's state changes too, unless a tick noticed the removal already
            q.put(b"after")
            r.commit(r.get(block=False))
        except JournalIOError:
            pass
    time.sleep(1.0)  # a few ticks: the queue notices the fault
    put_after: str = "accepted"
    try:
        q.put(b"after the fault")
    except Exception as exc:  # noqa: BLE001 - reported, whatever it is
        put_after = f"{type(exc).__name__}: {exc}"
    before_records, before_cpu = counter.count, _cpu()
    print("## idle start", file=sys.stderr, flush=True)
    time.sleep(idle)
    records, cpu = counter.count - before_records, _cpu() - before_cpu
    print("## idle end", file=sys.stderr, flush=True)
    result: dict[str, object] = {
        "scenario": scenario,
        "puts_before_fault": puts,
        "fault": None if fault is None else f"{type(fault).__name__}: {fault}",
        "put_after_fault": put_after,
        "idle_s": idle,
        "log_records_idle": records,
        "cpu_s_idle": round(cpu, 3),
        "log_records_total": counter.count,
    }
    stats = q.stats()
    health = getattr(stats, "health", None)
    if health is not None:
        keys = ("ok", "poisoned", "poisoned_since", "directory_gone", "failing", "last_error", "errors")
        result["health"] = {k: getattr(health, k) for k in keys}
    result["health"] = result.get("health")
    try:
        q.close()
    except Exception as exc:  # noqa: BLE001 - reported, whatever it is
        result["close"] = f"{type(exc).__name__}: {exc}"
    return result


# ----------------------------------------------------------------------------------- the parent
def run_child(
    scenario: str, directory: str, idle: float, env: dict[str, str] | None = None
) -> dict[str, object]:
    """Run one scenario in a child process (stderr drained by a thread, as a log pipe would be)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            os.path.abspath(__file__),
            "--child",
            scenario,
            "--dir",
            directory,
            "--idle",
            str(idle),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines = {"total": 0, "idle": 0}
    first: list[str] = []

    def drain() -> None:
        assert proc.stderr is not None
        inside = False
        for line in proc.stderr:
            lines["total"] += 1
            if line.startswith("## idle start"):
                inside = True
            elif line.startswith("## idle end"):
                inside = False
            elif inside:
                lines["idle"] += 1
            if len(first) < 6:
                first.append(line.rstrip()[:300])

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    assert proc.stdout is not None
    out = proc.stdout.read()  # stderr is the drain thread's alone
    proc.wait(timeout=idle + 120)
    t.join(10)
    try:
        result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        result = {"scenario": scenario, "failed": f"child exited {proc.returncode}", "stdout": out[-2000:]}
    result["stderr_lines_idle"] = lines["idle"]
    result["stderr_lines_total"] = lines["total"]
    result["stderr_first_lines"] = first
    return result


def mount_tmpfs(path: str, size: str = "1m") -> bool:
    if os.geteuid() != 0:
        return False
    os.makedirs(path, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], capture_output=True)
    return done.returncode == 0


def scenario(name: str, idle: float, directory: str | None) -> dict[str, object]:
    base = tempfile.mkdtemp(prefix="soak-faults-")
    try:
        if name == "diskfull" and directory is None:
            fs = os.path.join(base, "fs")
            if not mount_tmpfs(fs):
                return {"scenario": name, "skipped": "needs root to mount a tmpfs (or --dir on a small fs)"}
            try:
                return run_child(name, fs, idle)
            finally:
                subprocess.run(["umount", "-l", fs], capture_output=True)
        return run_child(name, directory or base, idle)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", choices=(*SCENARIOS, "all"), default="all")
    p.add_argument("--idle", type=float, default=5.0, help="seconds to stay idle after the fault (default 5)")
    p.add_argument("--dir", help="run in this directory (diskfull: one on a small file system)")
    p.add_argument("--json", action="store_true", help="one JSON object per scenario")
    p.add_argument("--child", choices=SCENARIOS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.dir, args.idle), default=str), flush=True)
        return 0
    names = SCENARIOS if args.scenario == "all" else (args.scenario,)
    for name in names:
        res = scenario(name, args.idle, args.dir)
        if args.json:
            print(json.dumps(res, default=str))
            continue
        if "skipped" in res or "failed" in res:
            print(f"{name}: {res.get('skipped') or res.get('failed')}")
            continue
        print(f"{name}: fault {res['fault']!s}")
        print(f"  put after the fault: {res['put_after_fault']}")
        print(
            f"  idle {res['idle_s']} s: {res['log_records_idle']} log records "
            f"({res['stderr_lines_idle']} stderr lines), {res['cpu_s_idle']} s CPU"
        )
        if res.get("health"):
            print(f"  stats().health: {res['health']}")
        for line in res["stderr_first_lines"]:  # type: ignore[union-attr]
            print(f"  | {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
