#!/usr/bin/env python3
"""Group commit across processes: durable puts/s of N client processes against one.

    python scripts/bench_group_commit_procs.py [--procs 8] [--rounds 5] [--seconds 2]
                                               [--size 1024] [--dir /var/tmp] [--tree PATH]
                                               [--fake-fsync SECONDS] [--profile FILE] [--json]

One owner process opens a fresh queue with ``sync="always"`` under ``--dir`` and puts nothing: it
only serves.  ``max(--procs)`` client processes each open the same directory with
``JournaledQueue(path)`` (README, "Many processes, one queue": the second opener is a client of
the first) and wait.  Each measurement tells 1 or N of them to call ``put`` with one ``--size``
byte item in a loop for ``--seconds``; the owner answers a put only once it is fdatasynced, so
the owner's connection threads (one per client connection) meet in its group commit.  The sides
alternate within each round (1, N, then N, 1 in the next round) so that a slower minute of the
shared machine hits both alike.  Per side the table shows the median over ``--rounds`` of puts/s,
the owner's fsyncs (``q.fsync_count``) per second and puts per fsync, the CPU time per put of the
owner (all its threads) and of the clients, the owner's context switches per put (all its
threads), the median fdatasync time, the median time between one fdatasync's end and the next
one's start (the round's puts, wake-ups and replies) and the clients' put p50; then the median of
the per-round ratios N / 1.  Goal (issue 26): 8 processes >= 5x one.

``--dir`` matters: on a real disk (ext4 /var/tmp) an fdatasync costs a fraction of a
millisecond to milliseconds and batching pays; on tmpfs (/dev/shm) it costs nothing and the
figures show only the socket and CPU cost.  ``--fake-fsync SECONDS`` replaces the owner's
fdatasync by a sleep (through the ``fileio`` seam), which compares schemes without the disk's
noise.  ``--profile FILE`` runs every thread of the owner under cProfile, timed by each thread's
CPU time (``time.thread_time``: waiting in ``recv`` or on a lock counts nothing), writes the merged
stats to FILE (``python -m pstats FILE``) and prints the top entries.  Measure another checkout
with ``--tree``.  ``run()`` is what scripts/bench_targets.py calls.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


# ------------------------------------------------------------------------------------ owner
def context_switches() -> int:
    """Context switches (voluntary and not) of every live thread of this process so far."""
    total = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/status") as f:
                total += sum(int(line.split()[1]) for line in f if "ctxt_switches" in line)
        except (FileNotFoundError, ValueError):
            pass  # a thread that ended meanwhile
    return total


def owner_main(directory: str, fake: float, profile: str | None, spin: float | None) -> int:
    """The owner: serve the queue, put nothing; answer ``mark`` on stdin with its counters."""
    profilers: list[Any] = []
    if profile:
        import cProfile
        import threading

        plain_run = threading.Thread.run

        def profiled_run(self: threading.Thread) -> None:
            prof = cProfile.Profile(time.thread_time)  # CPU time: a blocked recv or lock costs nothing
            profilers.append(prof)
            prof.enable()
            try:
                plain_run(self)
            finally:
                prof.disable()

        threading.Thread.run = profiled_run  # type: ignore[method-assign]
    from journaled import JournaledQueue, QueueConfig
    from journaled.disk import fileio

    if spin is not None:
        import journaled.remote.server as server

        server.SPIN = spin
    from bench_group_commit import timed_fsyncs

    ops, spans = timed_fsyncs(fake)
    with fileio.use(ops):
        q = JournaledQueue(directory, QueueConfig(sync="always"))
        print("ready", flush=True)
        for line in sys.stdin:
            if line.strip() != "mark":
                break
            taken, spans[:] = spans[:], []
            fsync_us = statistics.median(e - s for s, e in taken) * 1e6 if taken else 0.0
            gaps = [taken[i + 1][0] - taken[i][1] for i in range(len(taken) - 1)]
            gap_us = statistics.median(gaps) * 1e6 if gaps else 0.0
            mark = {
                "fsyncs": q.fsync_count,
                "cpu": time.process_time(),
                "switches": context_switches(),
                "fsync_us": fsync_us,
                "gap_us": gap_us,
            }
            print(json.dumps(mark), flush=True)
        q.close()
    if profile:
        import pstats

        stats = pstats.Stats(*profilers) if profilers else None
        if stats is not None:
            stats.dump_stats(profile)
    print("bye", flush=True)
    return 0


# ------------------------------------------------------------------------------------ client
def client_main(directory: str, size: int) -> int:
    """A client process: on ``go SECONDS`` put in a loop that long, then print what it did."""
    from journaled import JournaledQueue, QueueConfig

    q = JournaledQueue(directory, QueueConfig(sync="always"))
    if q.is_owner:
        raise SystemExit("the client became the owner: the owner process is gone")
    data = b"c" * size
    for _ in range(20):  # connect and warm up before the first measured put
        q.put(data)
    print("ready", flush=True)
    clock = time.perf_counter
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] != "go":
            break
        seconds = float(words[1])
        lat: list[float] = []
        put = q.put
        cpu = time.process_time()
        start = clock()
        deadline = start + seconds
        now = start
        while now < deadline:
            put(data)
            t = clock()
            lat.append(t - now)
            now = t
        elapsed = now - start
        cpu = time.process_time() - cpu
        lat.sort()
        out = {"count": len(lat), "elapsed": elapsed, "cpu": cpu, "p50": lat[len(lat) // 2] if lat else 0.0}
        print(json.dumps(out), flush=True)
    q.close()
    return 0


# ------------------------------------------------------------------------------------ parent
class Fleet:
    """One owner process and ``clients`` client processes of one queue under ``parent``."""

    def __init__(
        self,
        parent: str,
        clients: int,
        size: int,
        tree: str,
        fake: float,
        profile: str | None,
        spin: float | None,
    ) -> None:
        self.dir = os.path.join(tempfile.mkdtemp(prefix="gcp-", dir=parent), "q")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (tree, env.get("PYTHONPATH", "")) if p)
        me = [sys.executable, os.path.abspath(__file__)]
        owner_cmd = [*me, "--owner", self.dir, "--fake-fsync", repr(fake)]
        if profile:
            owner_cmd += ["--profile", profile]
        if spin is not None:
            owner_cmd += ["--owner-spin", repr(spin)]
        self.owner = self._start(owner_cmd, env)
        self.clients: list[subprocess.Popen[str]] = []
        self.clients = [
            self._start([*me, "--client", self.dir, "--size", str(size)], env) for _ in range(clients)
        ]

    @staticmethod
    def _start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
        p = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert p.stdout is not None
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{cmd[2]} process did not start (exit {p.wait()})")
        return p

    def _mark(self) -> dict[str, float]:
        assert self.owner.stdin is not None and self.owner.stdout is not None
        self.owner.stdin.write("mark\n")
        self.owner.stdin.flush()
        mark: dict[str, float] = json.loads(self.owner.stdout.readline())
        return mark

    def measure(self, n: int, seconds: float) -> dict[str, float]:
        """``n`` clients put for ``seconds`` at once: puts/s, fsyncs, the owner's costs."""
        team = self.clients[:n]
        before = self._mark()
        for c in team:
            assert c.stdin is not None
            c.stdin.write(f"go {seconds!r}\n")
            c.stdin.flush()
        outs = []
        for c in team:
            assert c.stdout is not None
            outs.append(json.loads(c.stdout.readline()))
        after = self._mark()
        puts = sum(o["count"] for o in outs)
        fsyncs = after["fsyncs"] - before["fsyncs"]
        return {
            "procs": n,
            "puts_per_s": sum(o["count"] / o["elapsed"] for o in outs),
            "puts": puts,
            "fsyncs": fsyncs,
            "puts_per_fsync": puts / max(1, fsyncs),
            "owner_cpu_us_per_put": (after["cpu"] - before["cpu"]) / max(1, puts) * 1e6,
            "client_cpu_us_per_put": sum(o["cpu"] for o in outs) / max(1, puts) * 1e6,
            "owner_switches_per_put": (after["switches"] - before["switches"]) / max(1, puts),
            "fsync_us": after["fsync_us"],
            "gap_us": after["gap_us"],
            "client_p50_us": statistics.median(o["p50"] for o in outs) * 1e6,
        }

    def close(self) -> None:
        for c in self.clients:  # clients first: their connections' threads end, then the owner
            try:
                c.communicate("quit\n", timeout=60)
            except (subprocess.TimeoutExpired, OSError):
                c.kill()
        try:
            out, _ = self.owner.communicate("quit\n", timeout=120)
        except subprocess.TimeoutExpired:
            self.owner.kill()


def run(
    procs: list[int],
    rounds: int = 5,
    seconds: float = 2.0,
    size: int = 1024,
    directory: str = "/var/tmp",
    tree: str | None = None,
    fake: float = 0.0,
    profile: str | None = None,
    spin: float | None = None,
) -> dict[str, Any]:
    """Measure 1 client process against each count in ``procs``, alternating, ``rounds`` times.

    Returns ``{"runs": {count: [per-round dicts]}, "medians": {count: {...}}, "ratios": {count:
    median of the rounds' ratio to 1}}`` (counts as strings, as in JSON)."""
    tree = os.path.abspath(tree or os.path.dirname(HERE))
    counts = sorted({1, *procs})
    parent = tempfile.mkdtemp(prefix="bench_gcp_", dir=directory)
    runs: dict[str, list[dict[str, float]]] = {str(n): [] for n in counts}
    try:
        fleet = Fleet(parent, max(counts), size, tree, fake, profile, spin)
        try:
            for r in range(rounds):
                for n in counts if r % 2 == 0 else counts[::-1]:
                    runs[str(n)].append(fleet.measure(n, seconds))
        finally:
            fleet.close()
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    keys = [k for k in runs[str(counts[0])][0] if k != "procs"]
    medians = {n: {k: statistics.median(x[k] for x in v) for k in keys} for n, v in runs.items()}
    ratios = {
        n: statistics.median(x["puts_per_s"] / y["puts_per_s"] for x, y in zip(v, runs["1"], strict=True))
        for n, v in runs.items()
    }
    return {"runs": runs, "medians": medians, "ratios": ratios}


def filesystem(path: str) -> str:
    """The type of the filesystem ``path`` is on (from /proc/mounts; the longest mount prefix)."""
    path = os.path.realpath(path)
    best, kind = "", "?"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 2 and (path == parts[1] or path.startswith(parts[1].rstrip("/") + "/")):
                    if len(parts[1]) >= len(best):
                        best, kind = parts[1], parts[2]
    except OSError:
        pass
    return f"{kind} ({best})" if best else kind


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--procs", default="8", help="comma-separated client process counts besides 1 (default 8)"
    )
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds; medians shown (default 5)")
    ap.add_argument("--seconds", type=float, default=2.0, help="length of each measurement (default 2)")
    ap.add_argument("--size", type=int, default=1024, help="payload bytes per put (default 1024)")
    ap.add_argument("--dir", default="/var/tmp", help="parent of the queue directory (default /var/tmp)")
    ap.add_argument("--tree", help="import journaled from this checkout (default: this one)")
    ap.add_argument(
        "--fake-fsync",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="the owner sleeps this long instead of each fdatasync (the scheme without the disk's noise)",
    )
    ap.add_argument(
        "--owner-spin",
        type=float,
        metavar="SECONDS",
        help="the owner's connections poll this long before blocking (server.SPIN; 0: never poll)",
    )
    ap.add_argument("--profile", metavar="FILE", help="cProfile every owner thread; merged stats to FILE")
    ap.add_argument("--json", action="store_true", help="print every run and the medians as JSON")
    ap.add_argument("--owner", metavar="DIR", help=argparse.SUPPRESS)
    ap.add_argument("--client", metavar="DIR", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.owner:
        return owner_main(args.owner, args.fake_fsync, args.profile, args.owner_spin)
    if args.client:
        return client_main(args.client, args.size)
    procs = [int(x) for x in args.procs.split(",")]
    profile = os.path.abspath(args.profile) if args.profile else None
    load = os.getloadavg()
    res = run(
        procs,
        args.rounds,
        args.seconds,
        args.size,
        args.dir,
        args.tree,
        args.fake_fsync,
        profile,
        args.owner_spin,
    )
    load_after = os.getloadavg()
    if args.json:
        print(
            json.dumps({**res, "dir": args.dir, "filesystem": filesystem(args.dir), "load": load}, indent=2)
        )
    else:
        fake = f", fake fsync {args.fake_fsync * 1e6:.0f} us" if args.fake_fsync else ""
        print(
            f"{args.size} B puts, sync='always', client processes of one owner; {args.rounds} rounds x "
            f"{args.seconds:g} s, in {args.dir} ({filesystem(args.dir)}{fake}); medians; load average "
            f"{load[0]:.2f} before, {load_after[0]:.2f} after, {os.cpu_count()} cores"
        )
        print(
            f"{'procs':>5} {'puts/s':>9} {'fsyncs/s':>9} {'puts/fsync':>10} {'CPU/put owner':>13} "
            f"{'clients':>7} "
            f"{'switches':>8} {'fsync':>7} {'gap':>7} {'put p50':>8} {'x 1 proc':>9}  per round"
        )
        for n, m in res["medians"].items():
            per = " ".join(
                f"{x['puts_per_s'] / y['puts_per_s']:.2f}"
                for x, y in zip(res["runs"][n], res["runs"]["1"], strict=True)
            )
            fs = m["fsyncs"] / args.seconds
            print(
                f"{n:>5} {m['puts_per_s']:>9,.0f} {fs:>9,.0f} {m['puts_per_fsync']:>10.2f} "
                f"{m['owner_cpu_us_per_put']:>10.0f} us {m['client_cpu_us_per_put']:>4.0f} us "
                f"{m['owner_switches_per_put']:>8.1f} {m['fsync_us']:>4.0f} us {m['gap_us']:>4.0f} us "
                f"{m['client_p50_us']:>5.0f} us {res['ratios'][n]:>8.2f}x  {per}"
            )
        if profile:
            import pstats

            print(f"owner profile (every thread) in {profile}; top by own time:")
            pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
