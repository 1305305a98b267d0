#!/usr/bin/env python3
"""Side-by-side benchmark of journaled against the Python disk-queue peers, in one run.

Peers (install with ``pip install -e '.[bench]'``; the library itself never needs them):
persist-queue (file ``Queue`` and ``SQLiteAckQueue``), queuelib ``FifoDiskQueue``, diskcache
``Deque`` and litequeue ``LiteQueue``, plus two raw baselines (a bare ``os.write`` of
length+CRC32C+payload per record, and the same with ``fdatasync`` after each record).

Each implementation is measured single-threaded at each item size: ``put`` N items, then
``get`` (+ its ack/commit where the peer has one) all of them.  N is capped by a byte budget and
each phase by a time cap, so slow peers are measured on fewer items; the rate is what counts.

Durability classes (compare like with like; every row is labelled):

* ``fsync``: when ``put`` returns the item is on stable storage (fdatasync/fsync per put or per
  transaction): journaled ``sync="always"``, SQLiteAckQueue (SQLite's default
  ``synchronous=FULL``), diskcache and litequeue with ``synchronous=FULL``, raw write+fdatasync.
* ``os``: ``put`` hands the item to the OS (survives a process crash, not a power loss):
  journaled ``sync="never"``, queuelib (one ``os.write`` per push), persist-queue file Queue
  (write + flush + info file per put), diskcache/litequeue in WAL with ``synchronous=NORMAL``
  (their defaults), SQLiteAckQueue with ``synchronous=NORMAL`` (set by this script), raw write.
* ``periodic``: journaled's default, ``sync=0.05``: buffered in the process and written +
  fdatasynced at least every 50 ms (a process crash can lose the last 50 ms).  No peer offers
  this class; it is compared against the ``os`` class, which is *stronger than* or equal to it
  against a process crash and equal against power loss (none of those fsync per put).

Also measured: journaled ``put_many`` (batches of 1000), one producer + one consumer thread
(get + commit) at 1 KiB, and ``sync="always"`` put throughput against 1..16 producer threads
(group commit), which is the second plot.

Usage::

    python scripts/bench_peers.py                       # full run, ~3-6 min on 2 cores
    python scripts/bench_peers.py --quick               # smaller caps, ~1-2 min
    python scripts/bench_peers.py --json out.json --plots docs/img --markdown out.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from crc32c import crc32c  # noqa: E402

from journaled import JournaledQueue, QueueConfig  # noqa: E402
from journaled.errors import Empty  # noqa: E402

SIZES = (100, 1024, 65536)


# ------------------------------------------------------------------------------------ adapters
class Adapter:
    """One implementation under test: ``put(bytes)``, ``get() -> bytes`` (+ ack), ``close``."""

    name = "?"
    durability = "?"
    note = ""
    batch = 1

    def __init__(self, path: str) -> None:
        self.path = path

    def put(self, data: bytes) -> None:
        raise NotImplementedError

    def put_many(self, items: list[bytes]) -> None:
        for d in items:
            self.put(d)

    def get(self) -> bytes | None:
        raise NotImplementedError

    def finish_puts(self) -> None:
        """Called once after the put phase (inside its timing): make puts count as done."""

    def close(self) -> None:
        pass


class Journaled(Adapter):
    def __init__(self, path: str, sync: Any, batch: int = 1) -> None:
        super().__init__(path)
        self.q = JournaledQueue(path, QueueConfig(sync=sync))
        self.reader = self.q.reader("bench")
        self.sync = sync
        self.batch = batch
        self.name = "journaled" + (f" put_many({batch})" if batch > 1 else "")
        self.durability = {"always": "fsync", "never": "os"}.get(str(sync), "periodic")
        self.note = f"sync={sync!r}"

    def put(self, data: bytes) -> None:
        self.q.put(data)

    def put_many(self, items: list[bytes]) -> None:
        self.q.put_many(items)

    def get(self) -> bytes | None:
        r = self.reader
        try:
            item = r.get(block=False)
        except Empty:
            return None
        r.commit(item)
        return item.data

    def finish_puts(self) -> None:
        # periodic: count the final write-out + fdatasync in the put time (the class promises
        # durability within the interval); never: every put was already handed to the OS.
        if self.sync not in ("always", "never"):
            self.q.sync()

    def close(self) -> None:
        self.q.close()


class Queuelib(Adapter):
    name, durability, note = "queuelib FifoDiskQueue", "os", "os.write per push; no CRC, no ack"

    def __init__(self, path: str) -> None:
        super().__init__(path)
        from queuelib import FifoDiskQueue

        self.q = FifoDiskQueue(path)

    def put(self, data: bytes) -> None:
        self.q.push(data)

    def get(self) -> bytes | None:
        data: bytes | None = self.q.pop()
        return data

    def close(self) -> None:
        self.q.close()


class PersistFile(Adapter):
    name, durability, note = "persist-queue Queue", "os", "file Queue, get+task_done"

    def __init__(self, path: str) -> None:
        super().__init__(path)
        import persistqueue

        self.q = persistqueue.Queue(path, tempdir=path)

    def put(self, data: bytes) -> None:
        self.q.put(data)

    def get(self) -> bytes | None:
        import persistqueue

        try:
            data: bytes = self.q.get(block=False)
        except persistqueue.Empty:
            return None
        self.q.task_done()
        return data


class PersistSQLiteAck(Adapter):
    name = "persist-queue SQLiteAckQueue"

    def __init__(self, path: str, synchronous: str = "FULL") -> None:
        super().__init__(path)
        import persistqueue

        self.q = persistqueue.SQLiteAckQueue(path, auto_commit=True)
        if synchronous != "FULL":
            self.q._putter.execute(f"PRAGMA synchronous={synchronous}")
        self.durability = "fsync" if synchronous == "FULL" else "os"
        self.note = f"WAL, synchronous={synchronous}, get+ack"

    def put(self, data: bytes) -> None:
        self.q.put(data)

    def get(self) -> bytes | None:
        import persistqueue

        try:
            data: bytes = self.q.get(block=False)
        except persistqueue.Empty:
            return None
        self.q.ack(data)
        return data

    def close(self) -> None:
        self.q.close()


class DiskcacheDeque(Adapter):
    name = "diskcache Deque"

    def __init__(self, path: str, synchronous: int = 1) -> None:
        super().__init__(path)
        from diskcache import Cache, Deque

        self.q = Deque.fromcache(Cache(path, sqlite_synchronous=synchronous))
        self.durability = "fsync" if synchronous == 2 else "os"
        self.note = f"WAL, synchronous={'FULL' if synchronous == 2 else 'NORMAL'}, popleft (no ack)"

    def put(self, data: bytes) -> None:
        self.q.append(data)

    def get(self) -> bytes | None:
        try:
            data: bytes = self.q.popleft()
        except IndexError:
            return None
        return data

    def close(self) -> None:
        self.q._cache.close()


class Litequeue(Adapter):
    name = "litequeue"

    def __init__(self, path: str, synchronous: str = "NORMAL") -> None:
        super().__init__(path)
        from litequeue import LiteQueue

        self.q = LiteQueue(os.path.join(path, "q.sqlite3"))
        self.q.conn.execute(f"PRAGMA synchronous={synchronous}")
        self.durability = "fsync" if synchronous == "FULL" else "os"
        self.note = f"WAL, synchronous={synchronous}, pop+done"

    def put(self, data: bytes) -> None:
        self.q.put(data)  # type: ignore[arg-type]

    def get(self) -> bytes | None:
        msg = self.q.pop()
        if msg is None:
            return None
        self.q.done(msg.message_id)
        data: bytes = msg.data
        return data

    def close(self) -> None:
        self.q.close()


class RawWrite(Adapter):
    """The floor: one os.write of length+CRC32C+payload per record (optionally fdatasync)."""

    _HDR = struct.Struct("<II")

    def __init__(self, path: str, fsync: bool) -> None:
        super().__init__(path)
        self.fd = os.open(os.path.join(path, "raw"), os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        self.rfd = os.open(os.path.join(path, "raw"), os.O_RDONLY)
        self.fsync = fsync
        self.name = "raw os.write" + ("+fdatasync" if fsync else "")
        self.durability = "fsync" if fsync else "os"
        self.note = "baseline: len+crc32c+payload, read back with 2 reads"

    def put(self, data: bytes) -> None:
        os.write(self.fd, self._HDR.pack(len(data), crc32c(data)) + data)
        if self.fsync:
            os.fdatasync(self.fd)

    def get(self) -> bytes | None:
        hdr = os.read(self.rfd, 8)
        if not hdr:
            return None
        n, crc = self._HDR.unpack(hdr)
        data = os.read(self.rfd, n)
        if crc32c(data) != crc:
            raise ValueError("raw baseline: CRC mismatch")
        return data

    def close(self) -> None:
        os.close(self.fd)
        os.close(self.rfd)


Factory = Callable[[str], Adapter]


def implementations() -> list[tuple[str, Factory]]:
    """Every row of the main table as (label for --only, factory), grouped by durability class."""
    return [
        # periodic / os: no fsync per put
        ("journaled periodic", lambda p: Journaled(p, 0.05)),
        ("journaled put_many periodic", lambda p: Journaled(p, 0.05, batch=1000)),
        ("journaled never", lambda p: Journaled(p, "never")),
        ("queuelib", Queuelib),
        ("persist-queue file", PersistFile),
        ("persist-queue sqliteack normal", lambda p: PersistSQLiteAck(p, "NORMAL")),
        ("diskcache normal", lambda p: DiskcacheDeque(p, 1)),
        ("litequeue normal", lambda p: Litequeue(p, "NORMAL")),
        ("raw write", lambda p: RawWrite(p, False)),
        # fsync per put
        ("journaled always", lambda p: Journaled(p, "always")),
        ("persist-queue sqliteack full", PersistSQLiteAck),
        ("diskcache full", lambda p: DiskcacheDeque(p, 2)),
        ("litequeue full", lambda p: Litequeue(p, "FULL")),
        ("raw write+fdatasync", lambda p: RawWrite(p, True)),
    ]


# ------------------------------------------------------------------------------------ measuring
def measure(
    factory: Factory, size: int, max_items: int, byte_budget: int, cap: float, root: str
) -> dict[str, Any]:
    """put up to N items (time-capped), then get all of them (time-capped); rates per phase."""
    path = tempfile.mkdtemp(prefix="bench-", dir=root)
    impl = factory(path)
    n_max = max(100, min(max_items, byte_budget // size))
    payload = os.urandom(size)
    try:
        put_n = 0
        t0 = time.perf_counter()
        deadline = t0 + cap
        if impl.batch > 1:
            batch = [payload] * impl.batch
            while put_n < n_max and time.perf_counter() < deadline:
                impl.put_many(batch)
                put_n += impl.batch
        else:
            put = impl.put
            while put_n < n_max:
                put(payload)
                put_n += 1
                if not put_n & 63 and time.perf_counter() > deadline:
                    break
        impl.finish_puts()
        put_s = time.perf_counter() - t0
        got = 0
        min_sample = min(put_n, 2000)  # a slow first read-back alone must not decide the rate
        get = impl.get
        t0 = time.perf_counter()
        deadline = t0 + cap
        while got < put_n:
            data = get()
            if data is None:
                raise RuntimeError(f"{impl.name}: queue empty after {got} of {put_n} gets")
            if len(data) != size:
                raise RuntimeError(f"{impl.name}: got {len(data)} bytes, put {size}")
            got += 1
            if not got & 63 and got >= min_sample and time.perf_counter() > deadline:
                break
        get_s = time.perf_counter() - t0
    finally:
        impl.close()
        shutil.rmtree(path, ignore_errors=True)
    return {
        "impl": impl.name,
        "durability": impl.durability,
        "note": impl.note,
        "size": size,
        "put_items": put_n,
        "put_per_s": put_n / put_s,
        "put_mb_s": put_n * size / put_s / 1e6,
        "get_items": got,
        "get_per_s": got / get_s,
        "get_mb_s": got * size / get_s / 1e6,
    }


def measure_spsc(kind: str, size: int, n: int, root: str) -> dict[str, Any]:
    """One producer thread and one consumer thread (get + commit) at once."""
    path = tempfile.mkdtemp(prefix="bench-", dir=root)
    payload = os.urandom(size)
    try:
        if kind == "journaled":
            q = JournaledQueue(path, QueueConfig(sync=0.05))
            r = q.reader("bench")

            def produce() -> None:
                put = q.put
                for _ in range(n):
                    put(payload)

            def consume() -> None:
                get, commit = r.get, r.commit
                for _ in range(n):
                    commit(get(timeout=30))

            close: Callable[[], None] = q.close
        else:
            from queuelib import FifoDiskQueue

            fq = FifoDiskQueue(path)
            lock = threading.Lock()

            def produce() -> None:
                for _ in range(n):
                    with lock:
                        fq.push(payload)

            def consume() -> None:
                left = n
                while left:
                    with lock:
                        d = fq.pop()
                    if d is None:
                        time.sleep(0)
                    else:
                        left -= 1

            close = fq.close
        t0 = time.perf_counter()
        threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        close()
    finally:
        shutil.rmtree(path, ignore_errors=True)
    return {"impl": kind, "size": size, "items": n, "per_s": n / elapsed, "mb_s": n * size / elapsed / 1e6}


def measure_group_commit(threads: int, size: int, cap: float, root: str) -> dict[str, Any]:
    """sync="always": ``threads`` producers put for ``cap`` seconds; fsync rounds counted."""
    path = tempfile.mkdtemp(prefix="bench-", dir=root)
    payload = os.urandom(size)
    counts = [0] * threads
    stop = threading.Event()
    try:
        with JournaledQueue(path, QueueConfig(sync="always")) as q:

            def produce(k: int) -> None:
                put = q.put
                c = 0
                while not stop.is_set():
                    put(payload)
                    c += 1
                counts[k] = c

            ts = [threading.Thread(target=produce, args=(k,)) for k in range(threads)]
            t0 = time.perf_counter()
            for t in ts:
                t.start()
            time.sleep(cap)
            stop.set()
            for t in ts:
                t.join()
            elapsed = time.perf_counter() - t0
            fsyncs = q.fsync_count
    finally:
        shutil.rmtree(path, ignore_errors=True)
    total = sum(counts)
    return {
        "threads": threads,
        "size": size,
        "items": total,
        "per_s": total / elapsed,
        "fsyncs": fsyncs,
        "items_per_fsync": total / max(1, fsyncs),
    }


# ------------------------------------------------------------------------------------ reporting
def ratio_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """journaled / peer, per size and phase, within a durability class.

    Peers of the ``os`` class are compared with journaled ``sync=0.05`` (periodic: the default)
    and ``sync="never"`` (os); peers of the ``fsync`` class with ``sync="always"``."""
    out = []
    against = {"os": ("periodic", "os"), "fsync": ("fsync",)}
    for r in results:
        if r["impl"].startswith("journaled"):
            continue
        for jcls in against[r["durability"]]:
            j = next(
                (
                    x
                    for x in results
                    if x["impl"] == "journaled" and x["durability"] == jcls and x["size"] == r["size"]
                ),
                None,
            )
            if j is None:
                continue
            out.append(
                {
                    "peer": r["impl"],
                    "peer_class": r["durability"],
                    "journaled": f"journaled ({jcls})",
                    "size": r["size"],
                    "put_ratio": j["put_per_s"] / r["put_per_s"],
                    "get_ratio": j["get_per_s"] / r["get_per_s"],
                }
            )
    return out


def fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def markdown(
    results: list[dict[str, Any]],
    ratios: list[dict[str, Any]],
    spsc: list[dict[str, Any]],
    group: list[dict[str, Any]],
) -> str:
    lines = [
        "### Throughput (single thread; get includes the ack/commit where the peer has one)",
        "",
        "| class | implementation | size | put items/s | put MB/s | get items/s | get MB/s | items | notes |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    order = {"periodic": 0, "os": 1, "fsync": 2}
    for r in sorted(results, key=lambda r: (order[r["durability"]], r["size"])):
        lines.append(
            f"| {r['durability']} | {r['impl']} | {r['size']} | {fmt_rate(r['put_per_s'])} | "
            f"{r['put_mb_s']:.1f} "
            f"| {fmt_rate(r['get_per_s'])} | {r['get_mb_s']:.1f} | {r['put_items']:,} | {r['note']} |"
        )
    lines += [
        "",
        "### Ratio journaled / peer (> 1: journaled is faster)",
        "",
        "| peer (class) | journaled row | size | put ratio | get+commit ratio |",
        "|---|---|---:|---:|---:|",
    ]
    for x in ratios:
        lines.append(
            f"| {x['peer']} ({x['peer_class']}) | {x['journaled']} | {x['size']} "
            f"| {x['put_ratio']:.2f}x | {x['get_ratio']:.2f}x |"
        )
    if spsc:
        lines += [
            "",
            "### One producer + one consumer thread (get + commit), periodic/os class",
            "",
            "| implementation | size | items/s | MB/s |",
            "|---|---:|---:|---:|",
        ]
        for s in spsc:
            lines.append(f"| {s['impl']} | {s['size']} | {fmt_rate(s['per_s'])} | {s['mb_s']:.1f} |")
    if group:
        one = group[0]["per_s"]
        lines += [
            "",
            '### sync="always": producer threads vs put throughput (group commit)',
            "",
            "| threads | items/s | x one thread | items per fsync |",
            "|---:|---:|---:|---:|",
        ]
        for g in group:
            lines.append(
                f"| {g['threads']} | {fmt_rate(g['per_s'])} | {g['per_s'] / one:.1f}x "
                f"| {g['items_per_fsync']:.1f} |"
            )
    return "\n".join(lines) + "\n"


def plot(
    results: list[dict[str, Any]], group: list[dict[str, Any]], raw_fsync: float | None, outdir: str
) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(outdir, exist_ok=True)
    written = []
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5))
    styles = {"periodic": "-", "os": "--", "fsync": ":"}
    for phase, ax in zip(("put", "get"), axes):
        seen = sorted({(r["impl"], r["durability"]) for r in results}, key=lambda k: (k[1], k[0]))
        for impl, cls in seen:
            rows = sorted(
                (r for r in results if r["impl"] == impl and r["durability"] == cls), key=lambda r: r["size"]
            )
            ax.plot(
                [r["size"] for r in rows],
                [r[f"{phase}_mb_s"] for r in rows],
                styles[cls],
                marker="o",
                linewidth=2.5 if impl.startswith("journaled") else 1.2,
                label=f"{impl} [{cls}]",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("item size (bytes)")
        ax.set_ylabel("MB/s")
        ax.set_title(f"{phase}{' + ack/commit' if phase == 'get' else ''}: throughput vs item size")
        ax.grid(True, which="both", alpha=0.3)
    axes[1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    p1 = os.path.join(outdir, "throughput_vs_size.png")
    fig.savefig(p1, dpi=110)
    plt.close(fig)
    written.append(p1)
    if group:
        fig, ax = plt.subplots(figsize=(7, 5))
        ax.plot(
            [g["threads"] for g in group], [g["per_s"] for g in group], "o-", label='journaled sync="always"'
        )
        if raw_fsync:
            ax.axhline(raw_fsync, color="grey", linestyle="--", label="raw write+fdatasync, 1 thread")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("producer threads")
        ax.set_ylabel("durable puts/s (1 KiB)")
        ax.set_title("Group commit: durable put throughput vs producers")
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        p2 = os.path.join(outdir, "group_commit.png")
        fig.savefig(p2, dpi=110)
        plt.close(fig)
        written.append(p2)
    return written


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="item sizes in bytes (100,1024,65536)")
    ap.add_argument("--items", type=int, default=200_000, help="most items per cell (200000)")
    ap.add_argument("--bytes", type=int, default=256 * 2**20, help="most bytes per cell (256 MiB)")
    ap.add_argument("--cap", type=float, default=2.0, help="seconds cap per phase (2)")
    ap.add_argument("--repeat", type=int, default=2, help="rounds; the best of them is kept (2)")
    ap.add_argument("--threads", default="1,2,4,8,16", help="group-commit producer counts")
    ap.add_argument("--quick", action="store_true", help="caps 1 s, 50k items, 64 MiB, threads 1,4,8")
    ap.add_argument("--only", default="", help="comma-separated substrings: run only matching rows")
    ap.add_argument("--dir", default=None, help="where to create queues (default: system temp dir)")
    ap.add_argument("--json", default=None, help="write all results here")
    ap.add_argument("--markdown", default=None, help="write the tables here")
    ap.add_argument("--plots", default=None, help="write PNG plots into this directory")
    args = ap.parse_args(argv)
    if args.quick:
        args.cap, args.items, args.bytes, args.threads, args.repeat = 1.0, 50_000, 64 * 2**20, "1,4,8", 1
    sizes = [int(s) for s in args.sizes.split(",")]
    root = tempfile.mkdtemp(prefix="bench-peers-", dir=args.dir)
    only = [s for s in args.only.split(",") if s]
    print(f"# machine: {machine()}", file=sys.stderr)
    results = []
    try:
        # Round-robin over implementations, best of --repeat per cell: on a shared machine the
        # disk's fsync latency and the CPU drift over minutes, and peers measured side by side
        # see the same conditions.
        best: dict[tuple[str, int], dict[str, Any]] = {}
        missing: set[str] = set()
        for rep in range(args.repeat):
            for size in sizes:
                for label, factory in implementations():
                    if (only and not any(o in label for o in only)) or label in missing:
                        continue
                    try:
                        r = measure(factory, size, args.items, args.bytes, args.cap, root)
                    except ImportError as exc:
                        print(
                            f"skipped {label} (not installed: {exc.name}); pip install -e '.[bench]'",
                            file=sys.stderr,
                        )
                        missing.add(label)
                        continue
                    print(
                        f"[{rep + 1}/{args.repeat}] {r['durability']:>8} {r['impl']:<30} {size:>6} B  "
                        f"put {r['put_per_s']:>11,.0f}/s {r['put_mb_s']:>8.1f} MB/s   "
                        f"get {r['get_per_s']:>11,.0f}/s {r['get_mb_s']:>8.1f} MB/s",
                        file=sys.stderr,
                        flush=True,
                    )
                    key = (label, size)
                    if key not in best:
                        best[key] = r
                        results.append(r)
                        continue
                    b = best[key]  # keep the best put and the best get of the rounds
                    for phase in ("put", "get"):
                        if r[f"{phase}_per_s"] > b[f"{phase}_per_s"]:
                            for f in ("items", "per_s", "mb_s"):
                                b[f"{phase}_{f}"] = r[f"{phase}_{f}"]
        spsc = []
        if not only or any(o in "spsc" for o in only):
            n = 100_000 if not args.quick else 30_000
            for kind in ("journaled", "queuelib"):
                try:
                    spsc.append(measure_spsc(kind, 1024, n, root))
                    print(
                        f"spsc {kind}: {spsc[-1]['per_s']:,.0f}/s {spsc[-1]['mb_s']:.1f} MB/s",
                        file=sys.stderr,
                    )
                except ImportError:
                    pass
        group = []
        if not only or any(o in "group" for o in only):
            for t in (int(x) for x in args.threads.split(",")):
                group.append(measure_group_commit(t, 1024, args.cap, root))
                g = group[-1]
                print(
                    f"group commit {t:>2} threads: {g['per_s']:,.0f} puts/s, "
                    f"{g['items_per_fsync']:.1f}/fsync",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ratios = ratio_rows(results)
    md = markdown(results, ratios, spsc, group)
    print(md)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(md)
    raw_fsync = next(
        (r["put_per_s"] for r in results if r["impl"] == "raw os.write+fdatasync" and r["size"] == 1024), None
    )
    if args.plots:
        for p in plot(results, group, raw_fsync, args.plots):
            print(f"wrote {p}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "machine": machine(),
                    "args": vars(args),
                    "results": results,
                    "ratios": ratios,
                    "spsc": spsc,
                    "group_commit": group,
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
