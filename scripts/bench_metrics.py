"""What a Prometheus collector costs a queue's put and get (journaled.metrics, docs/metrics.md).

Runs ``--rounds`` rounds; in each, the same workload twice on a fresh queue, once with nobody
scraping and once with a thread scraping a registry holding a QueueCollector every
``--interval`` seconds (a whole scrape: ``q.stats()`` and the exposition text, as an HTTP scrape
does, minus the socket), in alternating order so the machine's drift hits both alike:

* put: single ``q.put`` calls of ``--size`` bytes for ``--seconds``;
* get+commit: items read back one ``get`` and one ``commit`` at a time for as long (the reader
  refilled with ``put_many`` outside the timed part when it runs dry).

Prints items/s per phase and mode -- by the wall clock, and per CPU-second of the thread doing
them (steadier on a shared machine: other processes' load does not count) -- the per-round ratio
scraped / not scraped and its median, the scraping thread's CPU as a share of the wall time (what
it takes from the GIL), then the time of one scrape of a queue with 1 and with 50 readers
(median and 90th percentile).
``sync="never"`` by default: the CPU-bound case, where a scrape's share of the GIL shows most.

    python scripts/bench_metrics.py                   # about a minute
    python scripts/bench_metrics.py --rounds 9 --seconds 5 --sync 0.05
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, generate_latest

from journaled import JournaledQueue, QueueConfig
from journaled.metrics import QueueCollector


def _sync(text: str) -> str | float:
    return text if text in ("always", "never") else float(text)


class Phase:
    """Items done, and the wall and CPU (this thread's) seconds they took."""

    def __init__(self) -> None:
        self.items, self.wall, self.cpu = 0, 0.0, 0.0

    def run(self, n: int, step: Callable[[], None]) -> None:
        w, c = time.perf_counter(), time.thread_time()
        for _ in range(n):
            step()
        self.wall += time.perf_counter() - w
        self.cpu += time.thread_time() - c
        self.items += n


def workload(args: argparse.Namespace, scraped: bool) -> tuple[Phase, Phase, int, float]:
    """(put, get+commit, scrapes done, the scraping thread's CPU seconds) on a fresh queue."""
    d = tempfile.mkdtemp(prefix="bench_metrics_")
    try:
        q = JournaledQueue(d + "/q", QueueConfig(sync=args.sync))
        r = q.reader("r")
        registry = CollectorRegistry()
        registry.register(QueueCollector([q]))
        stop = threading.Event()
        scrapes = [0, 0.0]

        def scraper() -> None:
            while not stop.wait(args.interval):
                c = time.thread_time()
                generate_latest(registry)
                scrapes[0] += 1
                scrapes[1] += time.thread_time() - c

        thread = threading.Thread(target=scraper, daemon=True)
        if scraped:
            thread.start()
        payload = b"x" * args.size
        put, get = Phase(), Phase()
        while put.wall < args.seconds:
            put.run(1000, lambda: q.put(payload))
        # get+commit for as long, refilling the reader untimed whenever it runs dry
        left = put.items
        while get.wall < args.seconds:
            if left == 0:
                q.put_many([payload] * 10_000)
                left = 10_000
            n = min(1000, left)
            get.run(n, lambda: r.commit(r.get(timeout=10)))
            left -= n
        stop.set()
        if scraped:
            thread.join()
        q.close()
        return put, get, int(scrapes[0]), scrapes[1]
    finally:
        shutil.rmtree(d, ignore_errors=True)


def scrape_time(readers: int, runs: int) -> tuple[float, float]:
    """(median, p90) milliseconds of one scrape of a queue with ``readers`` readers, each with a
    backlog, an open read and a commit behind it."""
    d = tempfile.mkdtemp(prefix="bench_metrics_")
    try:
        with JournaledQueue(d + "/q", QueueConfig(sync="never")) as q:
            rs = [q.reader(f"reader-{i:02d}") for i in range(readers)]
            q.put_many([b"x" * 100] * 100)
            for r in rs:
                r.commit(r.get(timeout=10))
                r.get(timeout=10)
            registry = CollectorRegistry()
            registry.register(QueueCollector([q]))
            times = []
            for _ in range(runs):
                t0 = time.perf_counter()
                generate_latest(registry)
                times.append((time.perf_counter() - t0) * 1000)
        times.sort()
        return statistics.median(times), times[int(len(times) * 0.9)]
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5, help="rounds of (not scraped, scraped) pairs (default 5)")
    p.add_argument("--seconds", type=float, default=3.0, help="seconds per phase (default 3)")
    p.add_argument("--size", type=int, default=100, help="payload bytes (default 100)")
    p.add_argument("--interval", type=float, default=0.1, help="seconds between scrapes (default 0.1)")
    p.add_argument("--sync", type=_sync, default="never", help='"always", "never" or seconds (default never)')
    p.add_argument(
        "--scrape-runs", type=int, default=200, help="scrapes timed per reader count (default 200)"
    )
    args = p.parse_args()

    ratios: dict[str, list[float]] = {"put": [], "get+commit": [], "put (CPU)": [], "get+commit (CPU)": []}
    print(
        f"{args.seconds}s per phase, items of {args.size} B, sync={args.sync}, scraped every {args.interval}s"
    )
    print("items/s: by the wall clock, and per CPU-second of the thread doing them")
    print(f"{'round':>5} {'mode':>11} {'put/s':>9} {'CPU':>9} {'get+commit/s':>13} {'CPU':>9} {'scrapes':>8}")
    scraper_share = []
    for n in range(args.rounds):
        order = (False, True) if n % 2 == 0 else (True, False)
        got = {}
        for scraped in order:
            put, get, scrapes, scraper_cpu = workload(args, scraped)
            rates = (put.items / put.wall, put.items / put.cpu, get.items / get.wall, get.items / get.cpu)
            got[scraped] = rates
            if scraped:
                scraper_share.append(scraper_cpu / (put.wall + get.wall))
            mode = "scraped" if scraped else "not scraped"
            cells = " ".join(f"{v:>{w},.0f}" for v, w in zip(rates, (9, 9, 13, 9)))
            print(f"{n + 1:>5} {mode:>11} {cells} {scrapes:>8}", flush=True)
        for k, phase in enumerate(("put", "put (CPU)", "get+commit", "get+commit (CPU)")):
            ratios[phase].append(got[True][k] / got[False][k])
    for phase, values in ratios.items():
        shown = " ".join(f"{v:.3f}" for v in values)
        print(f"{phase}: scraped / not scraped = {shown}; median {statistics.median(values):.3f}")
    print(f"the scraping thread's CPU: {statistics.median(scraper_share):.2%} of the wall time (median)")
    for readers in (1, 50):
        median, p90 = scrape_time(readers, args.scrape_runs)
        print(f"one scrape, {readers} reader(s): median {median:.2f} ms, p90 {p90:.2f} ms")


if __name__ == "__main__":
    main()
