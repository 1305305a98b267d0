#!/usr/bin/env python3
"""Reproduce the everyday-safety figures: what a damaged record costs, `check` while the owner
archives, descriptors leaked by failed opens, and a program that ends without ``close()``.

    python scripts/everyday_safety.py damage            # 2,000 items, 4 flipped bytes in record 502
    python scripts/everyday_safety.py check-archiving   # 100 `journaled check` runs against a live owner
    python scripts/everyday_safety.py failed-opens      # fds leaked by 20 failed opens, per cause
    python scripts/everyday_safety.py exit-without-close
    python scripts/everyday_safety.py all

Run it with ``PYTHONPATH=<another checkout>`` to measure another revision the same way.  Every
queue lives in a fresh temporary directory.
"""

from __future__ import annotations

import argparse
import glob
import logging
import os
import subprocess
import sys
import tempfile
import time

from journaled import Empty, JournaledError, JournaledQueue, QueueConfig
from journaled.format.record import PUT_OVERHEAD, header_size


def _tmp() -> str:
    return tempfile.mkdtemp(prefix="everyday-")


def damage() -> None:
    """The default open after 4 flipped bytes in record 502 of 2,000, and what `check` said."""
    logging.disable(logging.WARNING)
    d = _tmp() + "/q"
    with JournaledQueue(d, QueueConfig(sync="never"), name="q") as q:
        q.reader("r")
        for i in range(1, 2001):
            q.put(b"%040d" % i)
    (f,) = glob.glob(d + "/q.[0-9]*")
    off = header_size("q") + 501 * (PUT_OVERHEAD + 40) + 20
    with open(f, "r+b") as fh:
        fh.seek(off)
        b = fh.read(4)
        fh.seek(off)
        fh.write(bytes(x ^ 0xFF for x in b))
    out = subprocess.run([sys.executable, "-m", "journaled", "check", d], capture_output=True, text=True)
    print(f"journaled check (exit {out.returncode}):")
    print(out.stdout.replace(d, "<dir>"), end="")
    with JournaledQueue(d, name="q") as q:
        r = q.reader("r")
        got = []
        while True:
            try:
                it = r.get(block=False)
            except Empty:
                break
            got.append(it.id)
            r.commit(it)
        lost = sorted(set(range(1, 2001)) - set(got))
        span = f"{lost[0]}..{lost[-1]} ({len(lost)} ids)" if lost else "none"
        print(f"default open delivered {len(got)} of 2000; ids lost: {span}")
        print("recovery_report:", [(e.action, e.ids_lost) for e in q.recovery_report])


_OWNER = """
import sys
from journaled import Empty, JournaledQueue, QueueConfig
path, archive = sys.argv[1], sys.argv[2]
cfg = QueueConfig(sync="never", journal_size=40 + 3 * 73, archive_dir=archive, checkpoint_interval=0.001)
with JournaledQueue(path, cfg, name="q") as q:
    r = q.reader("r")
    print("ready", flush=True)
    i = 0
    while True:
        i += 1
        q.put(b"%040d" % i)
        try:
            r.commit(r.get(block=False))
        except Empty:
            pass
        if i % 5 == 0:
            q.checkpoint()
"""


def check_archiving(runs: int) -> None:
    """`journaled check` in a separate process, ``runs`` times, while the owner archives."""
    d = _tmp()
    path, archive = d + "/q", d + "/archive"
    os.mkdir(archive, 0o700)
    owner = subprocess.Popen([sys.executable, "-c", _OWNER, path, archive], stdout=subprocess.PIPE)
    assert owner.stdout is not None
    owner.stdout.readline()
    time.sleep(0.5)
    bad = []
    try:
        for _ in range(runs):
            r = subprocess.run(
                [sys.executable, "-m", "journaled", "check", path], capture_output=True, text=True
            )
            if r.returncode:
                bad.append(((r.stdout + r.stderr).strip().splitlines() or ["?"])[-1][:100])
    finally:
        owner.kill()
        owner.wait()
    print(
        f"{len(bad)} of {runs} checks exited non-zero; files archived meanwhile: {len(os.listdir(archive))}"
    )
    for line in bad[:5]:
        print("  ", line)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def failed_opens() -> None:
    """Descriptors left open by 20 failed opens, for each of four late failures."""
    logging.disable(logging.WARNING)
    base = _tmp()

    def broken(label: str, obstacle: str, **cfg: object) -> object:
        d = os.path.join(base, label)
        with JournaledQueue(d) as q:
            q.reader("r")
        os.remove(os.path.join(d, label + ".readers"))
        os.makedirs(os.path.join(d, obstacle))
        return lambda: JournaledQueue(d, QueueConfig(**cfg))  # type: ignore[arg-type]

    cases = {
        "archive_dir is a file": broken("a", "x", archive_dir="x/f"),
        "registry cannot be rewritten": broken("g", ".g.readers.tmp"),
        "a directory named like a journal file": broken("j", "j.99999999999999"),
        "checkpoint is a directory": broken("c", "c.read.s"),
    }
    open(os.path.join(base, "a", "x", "f"), "w").close()
    for name, attempt in cases.items():
        for n in range(21):  # the first one warms up lazily opened descriptors
            if n == 1:
                before = _fds()
            try:
                attempt()  # type: ignore[operator]
            except (OSError, JournaledError):
                pass
        print(f"{name}: {_fds() - before} fds leaked by 20 failed opens")


def exit_without_close() -> None:
    """A program that puts 1,000 items under the default sync and ends without close()."""
    d = os.path.join(_tmp(), "q")
    prog = (
        "import sys; from journaled import JournaledQueue; q = JournaledQueue(sys.argv[1]); "
        "q.reader('r'); q.put_many([b'x'] * 1000)"
    )
    subprocess.run([sys.executable, "-c", prog, d], check=True)
    with JournaledQueue(d) as q:
        r = q.reader("r")
        n = 0
        while True:
            try:
                r.commit(r.get(block=False))
            except Empty:
                break
            n += 1
    print(f"items delivered after a normal exit without close(): {n} of 1000")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "what", choices=["damage", "check-archiving", "failed-opens", "exit-without-close", "all"]
    )
    ap.add_argument("--runs", type=int, default=100, help="check-archiving: number of checks (default 100)")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    steps = {
        "damage": damage,
        "check-archiving": lambda: check_archiving(args.runs),
        "failed-opens": failed_opens,
        "exit-without-close": exit_without_close,
    }
    for name, step in steps.items():
        if args.what in (name, "all"):
            print(f"## {name}")
            step()
    return 0


if __name__ == "__main__":
    sys.exit(main())
