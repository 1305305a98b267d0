"""A put's latency under nonstop scraping of the status page and the metrics (issue 35, point 11).

One queue with ``READERS`` readers (3,000 by default) owned by this process, served by the status
page of ``journaled serve --http`` (cli/statuspage.py, with ``/metrics``), as ``serve`` starts it.
The main thread puts 100-byte items one at a time, 1 ms apart, for ``SECONDS``, in four phases:
not scraped, scraped, not scraped, scraped.  While scraped, ``SCRAPERS`` other processes (2 by
default) fetch ``/api/status`` and ``/metrics`` back to back, with no pause, over HTTP (as a
browser and Prometheus would, only without their pauses).  Prints each phase's put count, p50, p99
and max and the scrapes answered, then the ratio of each scraped phase's p99 to the not-scraped
phase before it (the goal: at most 1.5), and the load average (the machine may be shared: compare
the ratios, measured in one run, not absolute figures).

    python scripts/bench_scrape_put_p99.py [READERS [SECONDS [SCRAPERS]]]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

from journaled import JournaledQueue
from journaled.cli.serve import start_status_page

# what each scraping process runs: GET both pages back to back until its time is up, then
# print how many answers it got (bounded in time: it stops by itself)
SCRAPER = """
import sys, time, urllib.request
base, until = sys.argv[1], float(sys.argv[2])
n = 0
while time.time() < until:
    for path in ("/api/status", "/metrics"):
        try:
            with urllib.request.urlopen(base + path, timeout=30) as answer:
                answer.read()
            n += 1
        except OSError:
            time.sleep(0.01)
print(n)
"""


def main() -> None:
    readers = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0
    scrapers = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    q = JournaledQueue(tempfile.mkdtemp(prefix="bench_scrape_") + "/q")
    for i in range(readers):
        q.reader(f"r{i}")
    q.put_many([b"x" * 100] * 1000)
    queues = [q]
    page, _url = start_status_page("127.0.0.1", 0, queues, token=False, peek=False)
    base = f"http://127.0.0.1:{page.port}"
    start = time.perf_counter()
    q.stats()
    print(f"one q.stats(): {1000 * (time.perf_counter() - start):.0f} ms", flush=True)
    p99s: list[float] = []
    for mode in ("not scraped", "scraped", "not scraped", "scraped"):
        procs = []
        if mode == "scraped":
            until = time.time() + seconds
            procs = [
                subprocess.Popen([sys.executable, "-c", SCRAPER, base, str(until)], stdout=subprocess.PIPE)
                for _ in range(scrapers)
            ]
            time.sleep(0.5)  # the scrapers' interpreters start: measure while they scrape
        took = []
        end = time.perf_counter() + seconds - (0.5 if procs else 0.0)
        while time.perf_counter() < end:
            start = time.perf_counter()
            q.put(b"y" * 100)
            took.append(time.perf_counter() - start)
            time.sleep(0.001)
        answered = sum(int(p.communicate(timeout=120)[0] or 0) for p in procs)
        took.sort()

        def ms(share: float, took: list[float] = took) -> float:
            return 1000 * took[int(share * (len(took) - 1))]

        p99s.append(ms(0.99))
        print(
            f"{mode:12} puts {len(took)}  p50 {ms(0.5):.2f} ms  p99 {ms(0.99):.2f} ms  "
            f"max {ms(1.0):.1f} ms  scrapes answered {answered}",
            flush=True,
        )
    ratios = [p99s[1] / p99s[0], p99s[3] / p99s[2]]
    print(f"p99 scraped / not scraped: {ratios[0]:.2f}, {ratios[1]:.2f}  (goal <= 1.5)", flush=True)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    page.close()
    q.close()


if __name__ == "__main__":
    main()
