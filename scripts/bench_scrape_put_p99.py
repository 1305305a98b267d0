"""A put's latency under nonstop scraping of the status page and the metrics (issue 35, point 11).

One queue with ``READERS`` readers (3,000 by default) owned by this process, served by the status
page of ``journaled serve --http`` (cli/statuspage.py, with ``/metrics``), as ``serve`` starts it.
``SCRAPERS`` other processes (2 by default) fetch ``/api/status`` and ``/metrics`` back to back,
with no pause, over HTTP (as a browser and Prometheus would, only without their pauses).  The main
thread puts 100-byte items one at a time, 1 ms apart, in slots of :data:`SLOT` seconds, scraped
and not scraped in turn (the order within each round drawn at random), ``SECONDS`` of each in all:
between scraped slots the scrapers are stopped (SIGSTOP; SIGCONT resumes them), and a slot starts
only once no render is under way and with the renders' answers due again.  Prints, for each mode,
the put count, p50, p99, p99.9 and max, pooled over its slots; then the ratio of the scraped p99 to
the not-scraped one (the goal: at most 1.5), the median of each round's own ratio (its scraped
slot's p99 to its not-scraped slot's: a slot hit by a burst of the machine's other work moves the
pooled p99, not this median) and the load average.

Short slots in turn, not one long phase of each, because the machine may be shared: its load
drifts over a minute, and the slots of both modes see the same drift, so the ratio compares the
modes and not two moments of the machine.

    python scripts/bench_scrape_put_p99.py [READERS [SECONDS [SCRAPERS]]]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from journaled import JournaledQueue
from journaled.cli.serve import start_status_page

#: seconds of one slot
SLOT = 2.5

# what each scraping process runs: GET both pages back to back until it is told to stop
# (SIGTERM), then print how many answers it got; it stops by itself once the benchmark is gone
# (its parent changed), and pauses after a failed request (no spinning on a closed port)
SCRAPER = """
import os, signal, sys, time, urllib.request
base, n, parent = sys.argv[1], 0, os.getppid()
def stop(*_):
    try:
        print(n, flush=True)
    finally:  # even when no one reads it any more (a failed print is an OSError, caught below)
        os._exit(0)
signal.signal(signal.SIGTERM, stop)
while os.getppid() == parent:
    for path in ("/api/status", "/metrics"):
        try:
            with urllib.request.urlopen(base + path, timeout=60) as answer:
                answer.read()
            n += 1
        except OSError:
            time.sleep(0.01)
stop()
"""


def _p99(times: list[float]) -> float:
    return sorted(times)[int(0.99 * (len(times) - 1))] if times else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("readers", nargs="?", type=int, default=3000, help="readers of the queue (3000)")
    parser.add_argument("seconds", nargs="?", type=float, default=20.0, help="seconds of each mode (20)")
    parser.add_argument("scrapers", nargs="?", type=int, default=2, help="scraping processes (2)")
    args = parser.parse_args()
    readers, seconds, scrapers = args.readers, args.seconds, args.scrapers
    q = JournaledQueue(tempfile.mkdtemp(prefix="bench_scrape_") + "/q")
    for i in range(readers):
        q.reader(f"r{i}")
    q.put_many([b"x" * 100] * 1000)
    page, _url = start_status_page("127.0.0.1", 0, [q], token=False, peek=False)
    renders = [page.status_render, getattr(page.metrics, "__self__")]
    start = time.perf_counter()
    q.stats()
    print(f"one q.stats(): {1000 * (time.perf_counter() - start):.0f} ms", flush=True)
    base = f"http://127.0.0.1:{page.port}"
    procs = [
        subprocess.Popen([sys.executable, "-c", SCRAPER, base], stdout=subprocess.PIPE)
        for _ in range(scrapers)
    ]
    took: dict[str, list[float]] = {"not scraped": [], "scraped": []}
    rounds: list[dict[str, float]] = []  # each round's p99 per mode
    try:
        time.sleep(1.0)  # the scrapers' interpreters start
        for p in procs:
            os.kill(p.pid, signal.SIGSTOP)
        for _round in range(max(1, round(seconds / SLOT))):
            rounds.append({})
            for mode in random.sample(sorted(took), 2):
                while any(r.rendering for r in renders):  # the last slot's render ends first
                    time.sleep(0.01)
                for r in renders:
                    r.expire()  # every slot starts with the renders due, as after a reuse
                if mode == "scraped":
                    for p in procs:
                        os.kill(p.pid, signal.SIGCONT)
                end = time.perf_counter() + SLOT
                first = len(took[mode])
                while time.perf_counter() < end:
                    start = time.perf_counter()
                    q.put(b"y" * 100)
                    took[mode].append(time.perf_counter() - start)
                    time.sleep(0.001)
                if mode == "scraped":
                    for p in procs:
                        os.kill(p.pid, signal.SIGSTOP)
                rounds[-1][mode] = _p99(took[mode][first:])
    finally:
        answered = 0
        for p in procs:
            os.kill(p.pid, signal.SIGTERM)
            os.kill(p.pid, signal.SIGCONT)
            answered += int(p.communicate(timeout=120)[0] or 0)
    p99s = {}
    for mode, times in took.items():
        times.sort()

        def ms(share: float, times: list[float] = times) -> float:
            return 1000 * times[int(share * (len(times) - 1))]

        p99s[mode] = ms(0.99)
        print(
            f"{mode:12} puts {len(times)}  p50 {ms(0.5):.2f} ms  p99 {ms(0.99):.2f} ms  "
            f"p99.9 {ms(0.999):.1f} ms  max {ms(1.0):.1f} ms",
            flush=True,
        )
    print(f"scrapes answered {answered}, renders {[r.renders for r in renders]}")
    ratio = p99s["scraped"] / p99s["not scraped"]
    each = statistics.median(r["scraped"] / r["not scraped"] for r in rounds if len(r) == 2)
    print(
        f"p99 scraped / not scraped: {ratio:.2f}, median of the rounds' own ratios {each:.2f}  (goal <= 1.5)",
        flush=True,
    )
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    page.close()
    q.close()


if __name__ == "__main__":
    main()
