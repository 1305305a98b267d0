"""A put's latency under nonstop metrics scraping (issue 35, point 11; not fixed yet).

One queue with ``READERS`` readers (3,000 by default) owned by this process; a thread scrapes a
registry holding a ``QueueCollector`` back to back (``q.stats()`` and the exposition text, as
``serve --metrics`` does, minus the socket) while the main thread puts 100-byte items one at a
time, 1 ms apart, for ``SECONDS``; then the same without scraping; twice each, alternating.
Prints the time of one ``q.stats()`` (all of it under the queue lock) and of one scrape, then
each phase's put count, p50, p99 and max.

    python scripts/bench_scrape_put_p99.py [READERS [SECONDS]]
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time

from prometheus_client import CollectorRegistry, generate_latest

from journaled import JournaledQueue
from journaled.metrics import QueueCollector


def main() -> None:
    readers = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0
    q = JournaledQueue(tempfile.mkdtemp(prefix="bench_scrape_") + "/q")
    for i in range(readers):
        q.reader(f"r{i}")
    q.put_many([b"x" * 100] * 1000)
    registry = CollectorRegistry()
    registry.register(QueueCollector([q]))
    start = time.perf_counter()
    q.stats()
    print(f"one q.stats(): {1000 * (time.perf_counter() - start):.0f} ms", flush=True)
    start = time.perf_counter()
    generate_latest(registry)
    print(f"one scrape: {1000 * (time.perf_counter() - start):.0f} ms", flush=True)
    stop = threading.Event()
    scrapes = [0]

    def scrape() -> None:
        while not stop.is_set():
            generate_latest(registry)
            scrapes[0] += 1

    for mode in ("not scraped", "scraped", "not scraped", "scraped"):
        stop.clear()
        scrapes[0] = 0
        thread = threading.Thread(target=scrape) if mode == "scraped" else None
        if thread is not None:
            thread.start()
        took = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            start = time.perf_counter()
            q.put(b"y" * 100)
            took.append(time.perf_counter() - start)
            time.sleep(0.001)
        stop.set()
        if thread is not None:
            thread.join()
        took.sort()

        def ms(share: float, took: list[float] = took) -> float:
            return 1000 * took[int(share * (len(took) - 1))]

        print(
            f"{mode:12} puts {len(took)}  p50 {ms(0.5):.2f} ms  p99 {ms(0.99):.2f} ms  "
            f"max {ms(1.0):.1f} ms  scrapes {scrapes[0]}",
            flush=True,
        )
    q.close()


if __name__ == "__main__":
    main()
