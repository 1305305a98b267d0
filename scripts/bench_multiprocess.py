#!/usr/bin/env python3
"""Many processes, one queue: what a client process pays, side by side in one run.

Measures, with 1 KiB items and the default sync policy (0.05 s):

* a client's round trip against the floor (printed first; ``--roundtrip``: only that): in one
  run, with the sides alternating over ``--rtt-rounds`` rounds, (a) a raw Python round trip
  between two processes over a Unix socket (1 KiB out, a 2-byte reply; the server a plain
  blocking ``recv``/``send`` loop in a child process), (a') the same exchange as journaled's
  frames (a put request, tagged as a client's is, and its reply through remote/transport.py,
  no queue behind it), (b) a client's single ``put`` of 1 KiB to a queue owned by another
  process (default sync, and ``sync="never"``), (c) a client's ``get`` + ``commit``; p50/p99 of
  each (median over the rounds), their ratio to (a), and the CPU time the server's process used per call
  (``/proc/<pid>/task/*/schedstat``): a spinning owner uses more than it works;
* a client's ``put_many`` of 1,000 items (items/s, median of ``--rounds`` batches);
* a client's single ``put`` round trip (p50 and p99 in µs);
* 2 consumer processes against 1 on one reader, each item costing ~200 µs of hashing (ratio of
  throughputs: the point of leaving the GIL behind);
* the owner's own in-process ``put`` throughput with no client connected, this checkout against
  another one (``--baseline``, e.g. the main branch), alternated in fresh processes (ratio).

Run from a checkout: ``PYTHONPATH=$PWD python scripts/bench_multiprocess.py [--baseline DIR]``.
Figures are recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Any

ITEM = b"x" * 1024

OWNER = """
import os, sys
import journaled.remote.server as server
from journaled import JournaledQueue, QueueConfig
if os.environ.get("BENCH_SPIN"):
    server.SPIN = float(os.environ["BENCH_SPIN"])
sync = os.environ.get("BENCH_SYNC")
q = JournaledQueue(sys.argv[1], QueueConfig(sync=sync) if sync else None)
for name in sys.argv[2:]:
    q.reader(name)
print("ready", flush=True)
sys.stdin.readline()
q.close()
"""

CONSUMER = """
import hashlib, sys, time
from journaled import JournaledQueue, Empty
q = JournaledQueue(sys.argv[1])
r = q.reader("work")
work, batch = int(sys.argv[2]), int(sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()
n = 0
while True:
    try:
        items = r.get_many(batch, timeout=0.5) if batch > 1 else [r.get(timeout=0.5)]
    except Empty:
        break
    for item in items:
        h = item.data
        for _ in range(work):
            h = hashlib.sha256(h).digest()
        if batch == 1:
            r.commit(item)
        n += 1
    if batch > 1:
        r.commit_many(items)
print(n, flush=True)
q.close()
"""

INPROC = """
import sys, tempfile, time
from journaled import JournaledQueue
item = b"x" * 1024
with tempfile.TemporaryDirectory() as d:
    with JournaledQueue(d + "/q") as q:
        q.reader("r")
        best = 0.0
        for _ in range(int(sys.argv[1])):
            t = time.perf_counter()
            for _ in range(20000):
                q.put(item)
            best = max(best, 20000 / (time.perf_counter() - t))
print(best)
"""


FRAME_SERVER = """
import socket, sys
from journaled.remote import protocol as proto
from journaled.remote.transport import FrameReader, send_frame
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1])
listener.listen(1)
print("ready", flush=True)
conn, _ = listener.accept()
frames = FrameReader(conn)
n = 0
reply = getattr(proto, "put_reply", lambda first, count: {"ok": True, "first": first, "count": count})
while frames.read() is not None:
    n += 1
    send_frame(conn, reply(n, 1))
"""

RAW_SERVER = """
import os, socket, sys
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1])
listener.listen(1)
print("ready", flush=True)
conn, _ = listener.accept()
size = int(sys.argv[2])
while True:
    got = 0
    while got < size:
        chunk = conn.recv(65536)
        if not chunk:
            sys.exit(0)
        got += len(chunk)
    conn.sendall(b"ok")
"""


def child(
    code: str, *args: str, pythonpath: str | None = None, env_extra: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    env.update(env_extra or {})
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def work_for(seconds: float) -> int:
    """How many chained sha256 rounds of a 32-byte digest take ``seconds`` here."""
    n, h = 20000, ITEM
    t = time.perf_counter()
    for _ in range(n):
        h = hashlib.sha256(h).digest()
    return max(1, int(n * seconds / (time.perf_counter() - t)))


def cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by every live thread of process ``pid`` (``schedstat``: ns)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:
            pass  # a thread that ended meanwhile
    return total / 1e9


def timed(op: object, n: int) -> list[float]:
    """``n`` calls of ``op`` (no arguments), each timed alone, in seconds, sorted."""
    call: Any = op
    lat = []
    clock = time.perf_counter
    for _ in range(n):
        t = clock()
        call()
        lat.append(clock() - t)
    lat.sort()
    return lat


def roundtrip(tmp: str, rounds: int, n: int) -> None:
    """The client's round trips against a raw socket's, alternated (the module docstring)."""
    import socket

    from journaled import JournaledQueue

    path = os.path.join(tmp, "raw.sock")
    raw = child(RAW_SERVER, path, str(len(ITEM)))
    assert raw.stdout is not None and raw.stdout.readline().strip() == "ready"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)

    def raw_rtt() -> None:
        sock.sendall(ITEM)
        if len(sock.recv(64)) != 2:
            raise RuntimeError("the raw server's reply was cut")

    from journaled.remote import protocol as proto
    from journaled.remote.transport import FrameReader, send_frame

    put_request = getattr(proto, "PUT_REQUEST", {"op": "put"})  # (a checkout before it: --baseline)
    if hasattr(proto, "tagged_put"):  # a client's put carries its producer tag (issue 25)
        put_request = proto.tagged_put(0x5EED_0000_0000_0001, 1)
    fpath = os.path.join(tmp, "frames.sock")
    fserver = child(FRAME_SERVER, fpath)
    assert fserver.stdout is not None and fserver.stdout.readline().strip() == "ready"
    fsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    fsock.connect(fpath)

    def frame_rtt() -> None:
        send_frame(fsock, put_request, ITEM)
        if FrameReader(fsock).read() is None:
            raise RuntimeError("the frame server went away")

    owners, queues = {}, {}
    for sync in ("0.05", "never"):
        d = os.path.join(tmp, f"rtt-{sync}")
        owners[sync] = child(OWNER, d, "r", env_extra={"BENCH_SYNC": "" if sync == "0.05" else sync})
        assert owners[sync].stdout is not None and owners[sync].stdout.readline().strip() == "ready"
        queues[sync] = JournaledQueue(d)
        assert not queues[sync].is_owner
    reader = queues["0.05"].reader("r")

    def get_commit() -> None:
        reader.commit(reader.get(timeout=5))

    sides: dict[str, list[tuple[float, float]]] = {}
    cpu: dict[str, list[float]] = {}
    for _ in range(rounds):
        for name, op, owner in (
            ("raw", raw_rtt, raw.pid),
            ("frames", frame_rtt, fserver.pid),
            ("put", lambda: queues["0.05"].put(ITEM), owners["0.05"].pid),
            ("put never", lambda: queues["never"].put(ITEM), owners["never"].pid),
            ("get+commit", get_commit, owners["0.05"].pid),
        ):
            if name == "get+commit":
                queues["0.05"].put_many([ITEM] * (n + 10))
            timed(op, n // 10)  # warm up
            before, wall = cpu_seconds(owner), time.perf_counter()
            lat = timed(op, n)
            wall = time.perf_counter() - wall
            cpu.setdefault(name, []).append((cpu_seconds(owner) - before) / n)
            sides.setdefault(name, []).append((lat[len(lat) // 2], lat[len(lat) * 99 // 100]))
    sock.close()
    raw.wait(timeout=60)
    fsock.close()
    fserver.wait(timeout=60)
    for sync, q in queues.items():
        q.close()
        owner = owners[sync]
        assert owner.stdin is not None
        owner.stdin.write("\n")
        owner.stdin.flush()
        owner.wait(timeout=120)
    floor = statistics.median(p50 for p50, _ in sides["raw"])
    print(f"round trips, 1 KiB, {rounds} rounds of {n} alternating (median of the rounds' p50/p99):")
    labels = {
        "raw": "(a) raw Python Unix-socket round trip",
        "frames": "(a') the same carrying journaled's frames",
        "put": "(b) client put, default sync",
        "put never": "(b) client put, sync='never'",
        "get+commit": "(c) client get + commit",
    }
    for name, runs in sides.items():
        p50 = statistics.median(r[0] for r in runs)
        p99 = statistics.median(r[1] for r in runs)
        p50s = ", ".join(f"{r[0] * 1e6:.0f}" for r in runs)
        print(
            f"  {labels[name]:40s} p50 {p50 * 1e6:5.0f} µs  p99 {p99 * 1e6:5.0f} µs  "
            f"x{p50 / floor:4.2f} of (a)  server CPU {statistics.median(cpu[name]) * 1e6:3.0f} µs/call  "
            f"(p50s: {p50s})"
        )


def consumers(d: str, procs: int, items: int, work: int, batch: int = 1) -> float:
    from journaled import JournaledQueue

    q = JournaledQueue(d)
    q.put_many([ITEM] * items)
    kids = [child(CONSUMER, d, str(work), str(batch)) for _ in range(procs)]
    for k in kids:
        assert k.stdout is not None and k.stdout.readline().strip() == "ready"
    t = time.perf_counter()
    for k in kids:
        assert k.stdin is not None
        k.stdin.write("\n")
        k.stdin.flush()
    done = sum(int(k.communicate(timeout=600)[0].split()[-1]) for k in kids)
    elapsed = time.perf_counter() - t - 0.5  # the last get's timeout
    q.close()
    assert done == items, (done, items)
    return items / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=20, help="put_many batches to time (default 20)")
    parser.add_argument("--puts", type=int, default=3000, help="single puts to time (default 3000)")
    parser.add_argument("--items", type=int, default=3000, help="items for the consumer test (default 3000)")
    parser.add_argument(
        "--batch", type=int, default=16, help="get_many size for the second consumer run (default 16)"
    )
    parser.add_argument("--baseline", help="another checkout's root (e.g. /work/main) for the owner ratio")
    parser.add_argument(
        "--roundtrip", action="store_true", help="only the round trips against the raw socket's floor"
    )
    parser.add_argument("--rtt-rounds", type=int, default=5, help="alternating rounds of round trips (5)")
    parser.add_argument("--rtt-calls", type=int, default=2000, help="calls timed per side and round (2000)")
    parser.add_argument(
        "--owner-spin",
        type=float,
        help="seconds the owner's connections poll before blocking (server.SPIN; 0: never poll)",
    )
    args = parser.parse_args()
    if args.owner_spin is not None:
        os.environ["BENCH_SPIN"] = repr(args.owner_spin)
    from journaled import JournaledQueue

    with tempfile.TemporaryDirectory() as tmp:
        roundtrip(tmp, args.rtt_rounds, args.rtt_calls)
    if args.roundtrip:
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "q")
        owner = child(OWNER, d, "r")
        assert owner.stdout is not None and owner.stdout.readline().strip() == "ready"
        q = JournaledQueue(d)
        assert not q.is_owner
        batch = [ITEM] * 1000
        rates = []
        for _ in range(args.rounds):
            t = time.perf_counter()
            q.put_many(batch)
            rates.append(1000 / (time.perf_counter() - t))
        lat = []
        for _ in range(args.puts):
            t = time.perf_counter()
            q.put(ITEM)
            lat.append(time.perf_counter() - t)
        lat.sort()
        q.close()
        assert owner.stdin is not None
        owner.stdin.write("\n")
        owner.stdin.flush()
        owner.wait(timeout=120)
        print(
            f"client put_many of 1,000 x 1 KiB: {statistics.median(rates):,.0f} items/s (median of "
            f"{args.rounds})"
        )
        print(
            f"client put round trip: p50 {lat[len(lat) // 2] * 1e6:.0f} µs, "
            f"p99 {lat[len(lat) * 99 // 100] * 1e6:.0f} µs"
        )

        work = work_for(200e-6)
        for batch in (1, args.batch):
            how = "get + commit each" if batch == 1 else f"get_many({batch}) + commit_many"
            one = consumers(os.path.join(tmp, f"c1-{batch}"), 1, args.items, work, batch)
            two = consumers(os.path.join(tmp, f"c2-{batch}"), 2, args.items, work, batch)
            print(
                f"consumers with ~200 µs of work per item ({how}): 1 process {one:,.0f}/s, "
                f"2 processes {two:,.0f}/s, ratio {two / one:.2f}"
            )

    if args.baseline:
        here = os.getcwd()
        mine, base = [], []
        for _ in range(3):
            for path, out in ((here, mine), (args.baseline, base)):
                k = child(INPROC, "3", pythonpath=path)
                out.append(float(k.communicate(timeout=600)[0]))
        print(
            f"owner in-process put, no client: this checkout {max(mine):,.0f}/s, "
            f"baseline {max(base):,.0f}/s, "
            f"ratio {max(mine) / max(base):.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
