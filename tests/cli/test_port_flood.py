"""Nothing that reaches a port of ``journaled serve`` can take the owner's resources (issue 35,
points 1 and 2): thousands of idle and slow connections to the status page and to the metrics
port at once, opened again as soon as the server closes them, and the owner still takes puts
from clients (a new client still connects), the page answers its token within a second, the
metrics answer a scrape, and the owner's descriptors stay clear of those it keeps for its
journal.  The owner runs under the usual limit of 1,024 descriptors; the attacker (port_flood.py,
a process of its own) raises its own."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from journaled import JournaledQueue
from journaled.remote.admission import FD_RESERVE
from support.paths import ROOT

pytest.importorskip("prometheus_client")

ENV = dict(os.environ, PYTHONPATH=ROOT)
#: connections the attacker opens to each of the two ports at once
CONNECTIONS = 5000
OWNER_FDS = 1024
FLOOD_SECONDS = 10.0
MEASURE_SECONDS = 4.0


def _owner_limit() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (OWNER_FDS, hard))


def _timed_get(url: str, headers: dict[str, str] | None = None) -> tuple[int, float]:
    start = time.monotonic()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=5.0) as r:
            r.read()
            code = r.status
    except urllib.error.HTTPError as exc:
        code = exc.code
    except OSError:  # no answer at all (a timeout, a reset)
        code = 0
    return code, time.monotonic() - start


def _puts_per_second(q: JournaledQueue, seconds: float, errors: list[BaseException]) -> float:
    n, start = 0, time.monotonic()
    try:
        while time.monotonic() - start < seconds:
            q.put(b"x" * 100)
            n += 1
    except Exception as exc:
        errors.append(exc)
    return n / (time.monotonic() - start)


@pytest.mark.parametrize("reopen", [False, True], ids=["held", "reopened-at-once"])
def test_a_flood_of_idle_and_slow_connections_leaves_puts_the_page_and_the_metrics_working(
    tmp_path, reopen: bool
) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 2 * CONNECTIONS + 200:
        pytest.skip(f"the attacker needs {2 * CONNECTIONS + 200} descriptors; the hard limit is {hard}")
    path = str(tmp_path / "jobs")
    with JournaledQueue(path) as q:
        q.reader("r")
    serve = subprocess.Popen(
        [sys.executable, "-m", "journaled", "serve", "--http", "0", "--metrics", "127.0.0.1:0", path],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        preexec_fn=_owner_limit,
    )
    flood = None
    try:
        assert serve.stdout is not None
        metrics_url = serve.stdout.readline().strip().removeprefix("metrics at ")
        page_url = serve.stdout.readline().strip().removeprefix("status page at ")
        assert serve.stdout.readline().startswith("serving ")
        api = page_url.replace("/?", "/api/status?")
        client = JournaledQueue(path)
        assert not client.is_owner
        errors: list[BaseException] = []
        before = _puts_per_second(client, 2.0, errors)
        ports = [page_url.split(":")[2].split("/")[0], metrics_url.split(":")[2].split("/")[0]]
        flood = subprocess.Popen(
            [sys.executable, os.path.join(os.path.dirname(__file__), "port_flood.py"), str(FLOOD_SECONDS)]
            + ["1" if reopen else "0", str(CONNECTIONS), *ports],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert flood.stdout is not None and flood.stdout.readline() == "flooding\n"
        time.sleep(0.5)  # every connection asked for, the first of them being pushed out
        rates: list[float] = []
        putter = threading.Thread(
            target=lambda: rates.append(_puts_per_second(client, MEASURE_SECONDS, errors))
        )
        putter.start()
        page, scrapes, fds = [], [], []
        while putter.is_alive():
            page.append(_timed_get(api))
            scrapes.append(_timed_get(metrics_url))
            fds.append(len(os.listdir(f"/proc/{serve.pid}/fd")))
            time.sleep(0.2)
        putter.join()
        newcomer = JournaledQueue(path)  # a client connecting during the flood
        try:
            assert not newcomer.is_owner
            newcomer.put(b"during the flood")
        finally:
            newcomer.close()
        figures = json.loads(flood.stdout.readline() or "{}") if flood.wait(timeout=60) == 0 else {}
        client.close()
        during = rates[0] if rates else 0.0
        print(
            f"\nflood: {figures}; puts/s before {before:.0f}, during {during:.0f} ({during / before:.2f}x); "
            f"page answers {[f'{t * 1000:.0f}ms' for _, t in page]}; scrapes max "
            f"{max(t for _, t in scrapes) * 1000:.0f} ms; owner descriptors max {max(fds)}"
        )
        problems = []
        if errors:
            problems.append(f"puts failed: {errors!r}")
        if not all(code == 200 for code, _ in page) or max(t for _, t in page) >= 1.0:
            problems.append(f"the page did not answer 200 within a second: {page}")
        if not all(code == 200 for code, _ in scrapes):
            problems.append(f"a scrape failed: {scrapes}")
        if max(fds) >= OWNER_FDS - FD_RESERVE:
            problems.append(f"the owner held {max(fds)} of its {OWNER_FDS} descriptors")
        # puts go on (main's owner ran out of descriptors). Their rate is printed above: a held
        # flood costs the owner little once its first burst is closed (0.9-1.3x on a quiet
        # machine), one reopened as fast as the attacker can (thousands of connections a
        # second) costs it CPU on cores the attacker shares (0.14-0.31x); the bounds here only
        # catch a stall, as the machine running the suite is shared and its load varies
        if during <= (0.05 if reopen else 0.15) * before:
            problems.append(f"puts/s fell from {before:.0f} to {during:.0f}")
        assert not problems, "\n".join(problems)
    finally:
        if flood is not None and flood.poll() is None:
            flood.kill()
            flood.wait()
        serve.terminate()
        try:
            serve.wait(timeout=60)
        finally:
            if serve.poll() is None:
                serve.kill()
                serve.wait()
