#!/usr/bin/env python3
"""Every speed figure of issues 37 and 26 (and older ones of issue 14), each a ratio to its goal, in one run.

    python scripts/bench_targets.py [--quick] [--json] [--skip NAME,...] [--dir PATH]
                                    [--backlog N] [--repeat N] [--tree PATH]

Measures, in this one run (so with the hot path ``journaled.format.speedups`` selects here: set
``JOURNALED_PURE_PYTHON=1`` for the pure-Python one), each ratio's two sides alternating, the
rows below; ``--skip`` leaves out those named (the name is the first column of the output):

========== =========================================================================== ==========
name       what                                                                        goal
========== =========================================================================== ==========
put        single ``put``, 100 B and 1 KiB, default sync, one reader, / queuelib push  >= 1.0
get        single ``get`` + ``commit``, 100 B and 1 KiB, / queuelib pop                >= 1.3
putget     put N then get+commit N, 1 KiB, items per second of both phases, / queuelib >= 1.0
meta       single ``put`` of 100 B with a key, and with headers, / a plain ``put``      >= 0.8
many       ``put_many`` of 100 B items in batches of 1000, one reader (issue 14)       >= 1M/s
spsc       one producer + one consumer thread, 1 KiB, get + commit                     >= 166 MB/s
threads    ``sync="always"``, 8 producer threads / 1 thread                            >= 5x
fsync      ``sync="always"``, 1 thread / a raw ``write`` + ``fdatasync`` loop (issue 14) >= 0.9
backlog    get+commit with a backlog of ``--backlog`` items (1M; the issue's 10M:     >= 0.9
           ``--backlog 10000000``) / with 1,000, 100 B items (bench_backlog.py --flat)
rtt        a client process's single ``put`` p50 / a raw Python Unix-socket round      <= 2.0
           trip (1 KiB out, a 2-byte reply) (bench_multiprocess.py --roundtrip)
procs      ``sync="always"``, 8 client processes / 1 (bench_group_commit_procs.py)     >= 5x
procsfake  the same with the owner's fdatasync replaced by a 300 us sleep: the scheme  >= 5x
           without the disk, whose fsync time swings on a shared VM (the 1-process
           side of ``procs`` saw medians from 0.18 to 3.4 ms within minutes)
========== =========================================================================== ==========

The queuelib rows keep the best of ``--repeat`` rounds per side (journaled and queuelib
alternate in each round; peers and baselines of scripts/bench_peers.py); ``threads``, ``fsync``
and ``procs``/``procsfake`` show the median of the rounds' ratios (the disk's fsync time swings from one
second to the next on a shared machine); ``rtt`` the median of the rounds' p50s.  The header
names the machine: CPU model, cores, load average, Python, the hot path, the filesystem of
``--dir`` (fsync costs nothing on tmpfs: the ``sync="always"`` rows mean something only on a
real disk); every row shows the 1-minute load average when it was taken.

``--quick`` takes about 45 s on the 2-core development VM, the full run about 90 s
(``--backlog 10000000`` adds about 10 s and 1 GB in ``--dir``).  ``--json`` prints the rows
as JSON on stdout (the text goes to stderr).  A row that cannot be measured is reported as such
and the others go on; the exit status is then 1 (an unmet goal is not an error).  ``--tree``
measures another checkout's ``journaled`` package (e.g. main, exported with ``git archive``) with
this script's peers.
Needs queuelib (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS = ("put", "get", "putget", "meta", "many", "spsc", "threads", "fsync", "backlog") + (
    "rtt",
    "procs",
    "procsfake",
)
#: The owner's fdatasync in the ``procsfake`` row: a sleep this long (seconds), about what one
#: costs on the development VM's disk when it is quiet.
FAKE_FSYNC = 0.0003


class Report:
    """The rows measured so far, printed as they come (to ``out``)."""

    def __init__(self, out: Any) -> None:
        self.rows: list[dict[str, Any]] = []
        self.out = out

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def row(
        self,
        key: str,
        name: str,
        value: float,
        unit: str,
        goal: float,
        detail: str,
        higher: bool = True,
        data: dict[str, Any] | None = None,
    ) -> None:
        """One row: ``value`` against ``goal`` (``higher``: the goal is a floor); ``data`` goes
        into the JSON only (the figures the row was made from)."""
        met = value >= goal if higher else value <= goal
        load = os.getloadavg()[0]
        self.rows.append(
            {
                "row": key,
                "target": name,
                "value": value,
                "unit": unit,
                "goal": goal,
                "goal_is": ">=" if higher else "<=",
                "met": met,
                "load": round(load, 2),
                "detail": detail,
                "data": data or {},
            }
        )
        shown = f"{value:>10,.0f}" if value >= 1000 else f"{value:>10.3f}"
        aim = f"{goal:,.0f}" if goal >= 1000 else f"{goal:g}"
        self.say(
            f"{key:<9} {name:<46} {shown} {unit:<4} goal {'>=' if higher else '<='} {aim:<9} "
            f"{'met' if met else 'NOT met':<7}  load {load:4.2f}  {detail}"
        )


def filesystem(path: str) -> str:
    """The type and mount point of the filesystem ``path`` is on (/proc/mounts)."""
    import bench_group_commit_procs

    return bench_group_commit_procs.filesystem(path)


def git_head(tree: str) -> str:
    try:
        out = subprocess.run(
            ["git", "-C", tree, "log", "-1", "--format=%h %cd", "--date=iso"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return out.stdout.strip() or "not a git checkout"


def captured(fn: Callable[[], Any]) -> tuple[Any, str]:
    """``fn()`` with what it prints to stdout caught: its result and that text."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        result = fn()
    return result, buf.getvalue()


# ------------------------------------------------------------------------------------ rows
def queuelib_rows(rep: Report, skip: set[str], root: str, cap: float, items: int, repeat: int) -> None:
    """put, get+commit and put-then-get at 100 B and 1 KiB against queuelib, alternating."""
    import bench_peers as bp

    for size in (100, 1024):
        mine = {"put": 0.0, "get": 0.0, "both": 0.0}
        peer = {"put": 0.0, "get": 0.0, "both": 0.0}
        for _ in range(repeat):
            j = bp.measure(lambda p: bp.Journaled(p, 0.05), size, items, 256 << 20, cap, root)
            q = bp.measure(bp.Queuelib, size, items, 256 << 20, cap, root)
            for side, r in ((mine, j), (peer, q)):
                for ph in ("put", "get"):
                    side[ph] = max(side[ph], r[f"{ph}_per_s"])
                # N items put then N taken: the items per second of the two phases together
                side["both"] = max(side["both"], 1 / (1 / r["put_per_s"] + 1 / r["get_per_s"]))
        # issue 37's goals: put >= 1.0x queuelib, get+commit >= 1.3x
        for key, ph, label, goal in (("put", "put", "put", 1.0), ("get", "get", "get+commit", 1.3)):
            if key not in skip:
                rep.row(
                    key,
                    f"{label} {size} B / queuelib",
                    mine[ph] / peer[ph],
                    "x",
                    goal,
                    f"{mine[ph]:,.0f}/s vs {peer[ph]:,.0f}/s",
                )
        if size == 1024 and "putget" not in skip:
            rep.row(
                "putget",
                "put N then get+commit N, 1 KiB / queuelib",
                mine["both"] / peer["both"],
                "x",
                1.0,
                f"{mine['both']:,.0f}/s vs {peer['both']:,.0f}/s (items/s over both phases)",
            )


def meta_rows(rep: Report, root: str, cap: float, repeat: int) -> None:
    """A single put carrying a key, and one carrying headers, against a plain put (100 B, one
    reader, default sync, no dedup window), the three alternating in every round; best of each."""
    from journaled import JournaledQueue, QueueConfig

    payload = b"x" * 100
    best = {"plain": 0.0, "key": 0.0, "headers": 0.0}
    for r in range(repeat):
        for kind in best:
            path = os.path.join(root, f"meta-{kind}-{r}")
            with JournaledQueue(path, QueueConfig(sync=0.05)) as q:
                q.reader("r")
                put = q.put
                n, start = 0, time.perf_counter()
                while True:
                    for k in range(1000):
                        if kind == "plain":
                            put(payload)
                        elif kind == "key":
                            put(payload, key=b"k%d" % (n + k))
                        else:
                            put(payload, headers={"trace": b"0123456789abcdef"})
                    n += 1000
                    took = time.perf_counter() - start
                    if took >= cap:
                        break
                best[kind] = max(best[kind], n / took)
    for kind in ("key", "headers"):
        rep.row(
            "meta",
            f"put 100 B with {'a key' if kind == 'key' else 'headers'} / a plain put",
            best[kind] / best["plain"],
            "x",
            0.8,
            f"{best[kind]:,.0f}/s vs {best['plain']:,.0f}/s",
        )


def many_row(rep: Report, root: str, cap: float, repeat: int) -> None:
    import bench_peers as bp

    many = max(
        bp.measure(lambda p: bp.Journaled(p, 0.05, batch=1000), 100, 1_000_000, 256 << 20, cap, root)[
            "put_per_s"
        ]
        for _ in range(repeat)
    )
    rep.row(
        "many", "put_many 100 B, 1 reader (items/s)", many, "/s", 1_000_000, f"{many / 1e6:.2f} of the goal"
    )


def spsc_row(rep: Report, root: str, items: int, repeat: int) -> None:
    import bench_peers as bp

    spsc = max(bp.measure_spsc("journaled", 1024, items, root)["mb_s"] for _ in range(repeat))
    rep.row(
        "spsc",
        "1 producer + 1 consumer, 1 KiB (MB/s)",
        spsc,
        "MB/s",
        166,
        f"{spsc / 166:.2f} of BigQueue's published 166 MB/s",
    )


def group_commit_rows(rep: Report, skip: set[str], root: str, seconds: float, rounds: int) -> None:
    """sync="always": 8 threads against 1, and 1 thread against a raw write+fdatasync loop,
    the three alternating in every round (bench_group_commit.py's measurements)."""
    import bench_group_commit as bgc

    runs: dict[str, list[tuple[float, ...]]] = {"1": [], "8": [], "raw": []}
    for r in range(rounds):
        order = ["1", "8", "raw"] if r % 2 == 0 else ["raw", "8", "1"]
        for side in order:
            d = tempfile.mkdtemp(dir=root)
            try:
                if side == "raw":
                    runs[side].append(bgc.raw_fdatasync(d, 1024, seconds))
                else:
                    runs[side].append(bgc.durable_puts(d, int(side), 1024, seconds))
            finally:
                import shutil

                shutil.rmtree(d, ignore_errors=True)

    def med(side: str, k: int) -> float:
        return statistics.median(x[k] for x in runs[side])

    if "threads" not in skip:
        ratio = statistics.median(x[0] / y[0] for x, y in zip(runs["8"], runs["1"], strict=True))
        rep.row(
            "threads",
            'sync="always": 8 threads / 1 thread',
            ratio,
            "x",
            5.0,
            f"{med('8', 0):,.0f}/s vs {med('1', 0):,.0f}/s; puts/fsync {med('8', 2):.2f}; "
            f"fsync {med('8', 4):.0f} us + gap {med('8', 5):.0f} us (1 thread: {med('1', 4):.0f} + "
            f"{med('1', 5):.0f})",
            data={"rounds": runs},
        )
    if "fsync" not in skip:
        ratio = statistics.median(x[0] / y[0] for x, y in zip(runs["1"], runs["raw"], strict=True))
        rep.row(
            "fsync",
            'sync="always": 1 thread / write+fdatasync',
            ratio,
            "x",
            0.9,
            f"{med('1', 0):,.0f}/s vs {med('raw', 0):,.0f}/s",
            data={"rounds": runs},
        )


def backlog_row(rep: Report, root: str, backlog: int, ops: int, rounds: int) -> None:
    """bench_backlog.py --flat: get+commit (and put) at ``backlog`` items against 1,000."""
    import bench_backlog

    args = argparse.Namespace(dir=root, item_size=100, flat=backlog, rounds=rounds, ops=ops, keep=False)
    _, text = captured(lambda: bench_backlog.flat(args))
    found = re.findall(r"backlog\s+([\d,]+): put\s+([\d,]+)/s\s+get\+commit\s+([\d,]+)/s", text)
    rates = {
        int(n.replace(",", "")): (float(p.replace(",", "")), float(g.replace(",", ""))) for n, p, g in found
    }
    if set(rates) != {1000, backlog}:
        raise RuntimeError(f"bench_backlog.flat printed no rates for 1,000 and {backlog:,} items:\n{text}")
    (put_big, get_big), (put_small, get_small) = rates[backlog], rates[1000]
    reopen = re.search(r"reopen to first item ([\d.]+) s", text)
    written = re.search(rf"backlog {backlog:,} items .*? \((\d+) files, ([\d,]+) MiB\)", text)
    rep.row(
        "backlog",
        f"get+commit, backlog {backlog:,} / 1,000 (100 B)",
        get_big / get_small,
        "x",
        0.9,
        f"{get_big:,.0f}/s vs {get_small:,.0f}/s; put {put_big / put_small:.2f}x; "
        f"reopen to first item {reopen.group(1) if reopen else '?'} s; the backlog "
        f"{written.group(2) + ' MiB in ' + written.group(1) + ' files' if written else '?'}",
        data={"put_and_get_per_s": rates, "output": text},
    )


def rtt_row(rep: Report, rounds: int, calls: int, tree: str) -> None:
    """bench_multiprocess.py's round trips: a client's put p50 against a raw socket's."""
    import bench_multiprocess

    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (tree, os.environ.get("PYTHONPATH", "")) if p)
    with tempfile.TemporaryDirectory() as tmp:
        _, text = captured(lambda: bench_multiprocess.roundtrip(tmp, rounds, calls))
    sides = {
        m.group(1).strip(): (float(m.group(2)), float(m.group(3)))
        for m in re.finditer(r"^\s+(\(.*?\) .*?)\s+p50\s+(\d+) µs.*?x\s*([\d.]+) of \(a\)", text, re.M)
    }
    raw = sides.get("(a) raw Python Unix-socket round trip")
    put = sides.get("(b) client put, default sync")
    if raw is None or put is None:
        raise RuntimeError(f"bench_multiprocess.roundtrip printed no raw or put p50:\n{text}")
    others = "; ".join(
        f"{k.split(' ', 1)[1]} x{v[1]:.2f}" for k, v in sides.items() if v is not raw and v is not put
    )
    # the floor's p50 per round: on a shared VM it can jump between a few us and tens of us
    floors = re.search(r"raw Python Unix-socket round trip.*?\(p50s: ([\d, ]+)\)", text)
    rep.row(
        "rtt",
        "client put p50 / raw Unix-socket round trip",
        put[1],
        "x",
        2.0,
        f"{put[0]:.0f} us vs {raw[0]:.0f} us (the raw p50 per round: {floors.group(1) if floors else '?'}); "
        f"{others}",
        higher=False,
        data={"p50_us_and_ratio": sides, "output": text},
    )


def procs_row(rep: Report, key: str, directory: str, rounds: int, seconds: float, tree: str) -> None:
    """bench_group_commit_procs.py: 8 client processes against 1 under ``sync="always"``; for the
    ``procsfake`` row the owner's fdatasync is a sleep of ``FAKE_FSYNC`` (the scheme alone)."""
    import bench_group_commit_procs as gcp

    fake = FAKE_FSYNC if key == "procsfake" else 0.0
    res = gcp.run([8], rounds=rounds, seconds=seconds, size=1024, directory=directory, tree=tree, fake=fake)
    m8, m1 = res["medians"]["8"], res["medians"]["1"]
    rep.row(
        key,
        'sync="always": 8 client processes / 1' + (f", fsync = {fake * 1e6:.0f} us sleep" if fake else ""),
        res["ratios"]["8"],
        "x",
        5.0,
        f"{m8['puts_per_s']:,.0f}/s vs {m1['puts_per_s']:,.0f}/s; puts/fsync {m8['puts_per_fsync']:.2f}; "
        f"owner+client CPU/put {m8['owner_cpu_us_per_put']:.0f}+{m8['client_cpu_us_per_put']:.0f} us "
        f"(1 proc: {m1['owner_cpu_us_per_put']:.0f}+{m1['client_cpu_us_per_put']:.0f}); "
        f"fsync {m8['fsync_us']:.0f} us + gap {m8['gap_us']:.0f} us (1 proc: {m1['fsync_us']:.0f} + "
        f"{m1['gap_us']:.0f})",
        data=res,
    )


# ------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", default=os.path.dirname(HERE), help="checkout whose journaled/ is measured")
    ap.add_argument("--repeat", type=int, default=3, help="rounds per row (best or median kept; default 3)")
    ap.add_argument("--quick", action="store_true", help="smaller caps and fewer rounds (noisier)")
    ap.add_argument("--dir", default=None, help="where queues are created (default: system temp dir)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON on stdout (text to stderr)")
    ap.add_argument("--skip", default="", help=f"comma-separated rows to leave out: {','.join(ROWS)}")
    ap.add_argument(
        "--backlog",
        type=int,
        default=1_000_000,
        help="items of the backlog row (default 1M; the issue's 10M)",
    )
    args = ap.parse_args(argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if skip - set(ROWS):
        ap.error(f"--skip: unknown rows {', '.join(sorted(skip - set(ROWS)))} (rows: {', '.join(ROWS)})")
    tree = os.path.abspath(args.tree)
    sys.path.insert(0, tree)
    import journaled  # the tree's, before bench_peers puts this checkout on the path

    sys.path.insert(1, HERE)
    if os.path.exists(os.path.join(os.path.dirname(journaled.__file__), "format/speedups.py")):
        from journaled.format import speedups

        hot = speedups.describe()
        if os.path.exists(os.path.join(os.path.dirname(journaled.__file__), "hotpath.py")):
            from journaled import hotpath

            hot += f"; mypyc modules: {hotpath.describe()}"
    else:
        hot = "pure Python (this tree has no compiled hot path)"
    quick = args.quick
    cap, items = (0.7, 60_000) if quick else (1.5, 150_000)
    rounds = args.repeat if quick else max(args.repeat, 5)  # median rows
    parent = args.dir or tempfile.gettempdir()
    rep = Report(sys.stderr if args.json else sys.stdout)
    import platform

    cpu = "?"
    with contextlib.suppress(OSError, StopIteration), open("/proc/cpuinfo") as f:
        cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    load = os.getloadavg()
    machine = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "load_average": [round(x, 2) for x in load],
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hot_path": hot,
        "journaled": os.path.dirname(journaled.__file__),
        "commit": git_head(tree),
        "dir": parent,
        "filesystem": filesystem(parent),
    }
    rep.say(
        f"# {machine['cpu']}, {machine['cores']} cores, load average {load[0]:.2f} {load[1]:.2f} "
        f"{load[2]:.2f}; Python {machine['python']}; {machine['platform']}"
    )
    rep.say(f"# journaled {machine['journaled']} ({machine['commit']}); hot path: {hot}")
    rep.say(
        f"# queues in {parent}: {machine['filesystem']}; {'--quick' if quick else 'full run'}, "
        f"started {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}"
    )
    started = time.monotonic()
    root = tempfile.mkdtemp(prefix="bench-targets-", dir=parent)
    wanted: list[tuple[set[str], Callable[[], None]]] = [
        ({"put", "get", "putget"}, lambda: queuelib_rows(rep, skip, root, cap, items, args.repeat)),
        ({"meta"}, lambda: meta_rows(rep, root, cap, args.repeat)),
        ({"many"}, lambda: many_row(rep, root, cap, args.repeat)),
        ({"spsc"}, lambda: spsc_row(rep, root, items, args.repeat)),
        ({"threads", "fsync"}, lambda: group_commit_rows(rep, skip, root, cap, rounds)),
        (
            {"backlog"},
            lambda: backlog_row(rep, root, args.backlog, 20_000 if quick else 50_000, 2 if quick else 3),
        ),
        ({"rtt"}, lambda: rtt_row(rep, rounds, 1000 if quick else 2000, tree)),
        ({"procs"}, lambda: procs_row(rep, "procs", parent, rounds, 1.0 if quick else 2.0, tree)),
        ({"procsfake"}, lambda: procs_row(rep, "procsfake", parent, rounds, 1.0 if quick else 2.0, tree)),
    ]
    failed: list[dict[str, str]] = []
    try:
        for keys, measure in wanted:
            if keys <= skip:
                continue
            try:
                measure()
            except Exception as exc:  # one broken row must not lose the others of the run
                name = ",".join(sorted(keys - skip))
                failed.append({"rows": name, "error": repr(exc)})
                rep.say(f"{name:<9} could not be measured: {exc!r}")
    finally:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    took = time.monotonic() - started
    met = sum(r["met"] for r in rep.rows)
    load = os.getloadavg()
    rep.say(
        f"# {met} of {len(rep.rows)} goals met{f', {len(failed)} rows not measured' if failed else ''}; "
        f"took {took:.0f} s; load average at the end "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    if args.json:
        machine["load_average_end"] = [round(x, 2) for x in load]
        print(
            json.dumps(
                {
                    "machine": machine,
                    "quick": quick,
                    "rows": rep.rows,
                    "failed": failed,
                    "seconds": round(took, 1),
                    "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                },
                indent=2,
            )
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
