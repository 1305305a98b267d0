"""The status page's search and sections (issue 38, points 3 and 4), through its JSON routes:
``/api/find`` selects what ``journaled dump``'s filters select, starts a time search at the
first id put then (the time index), shows payloads only under ``--peek`` (escaped, cut), is
bounded in items and bytes, holds no queue lock while it reads the files and changes nothing;
``/api/status`` has a section for every queue the process serves (dead-letter queues too), the
open reads with the process holding each, and the put and commit rates."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from journaled import JournaledQueue, ReaderConfig
from journaled.cli import statuspage
from journaled.cli.statuspage import StatusServer
from journaled.format.record import Put
from support.paths import ROOT

TIMEOUT = 30.0


def _get(url: str) -> tuple[int, Any]:
    """The status and the JSON answered (the text of an answer that is not JSON: 401, 403)."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as r:
            code, body = r.status, r.read()
    except urllib.error.HTTPError as exc:
        code, body = exc.code, exc.read()
    try:
        return code, json.loads(body)
    except ValueError:
        return code, body.decode()


def _find(server: StatusServer, *pairs: tuple[str, str]) -> tuple[int, Any]:
    return _get(f"http://127.0.0.1:{server.port}/api/find?" + urllib.parse.urlencode(pairs))


def _ids(answer: dict[str, Any]) -> list[int]:
    return [it["id"] for it in answer["items"]]


@pytest.fixture
def orders(tmp_path) -> Iterator[tuple[JournaledQueue, float]]:
    """ids 1-100 plain; then (after ``middle``) 101-130 with keys and headers."""
    q = JournaledQueue(str(tmp_path / "orders"))
    q.reader("billing")
    q.put_many([b"plain %d" % i for i in range(100)])
    time.sleep(0.05)
    middle = time.time()
    time.sleep(0.05)
    for i in range(30):
        region = b"eu" if i % 2 else b"us"
        q.put(b"order %d" % i, key=b"cust-%d" % (i % 3), headers={"region": region, "v": b"%d" % (i % 5)})
    q.sync()
    yield q, middle
    q.close()


@pytest.fixture
def page(orders) -> Iterator[StatusServer]:
    q, _ = orders
    server = StatusServer([q], token=None)
    yield server
    server.close()


def test_find_selects_by_key_headers_and_id_range_as_dump_does(orders, page) -> None:
    q, _ = orders
    code, by_key = _find(page, ("key", "cust-1"))
    assert code == 200 and _ids(by_key) == [101 + i for i in range(30) if i % 3 == 1]
    (first, *_) = by_key["items"]
    assert first["key"] == "cust-1" and first["headers"] == {"region": "eu", "v": "1"} and first["size"] == 7
    assert "payload" not in first  # not started with --peek
    _, both = _find(page, ("header", "region=eu"), ("header", "v=3"))
    assert _ids(both) == [101 + i for i in range(30) if i % 2 and i % 5 == 3]
    _, ranged = _find(page, ("header", "region=us"), ("start", "105"), ("end", "110"))
    assert _ids(ranged) == [105, 107, 109] and ranged["scanned"] == 6
    _, plain = _find(page, ("start", "98"), ("end", "101"))
    assert _ids(plain) == [98, 99, 100, 101] and plain["items"][0]["key"] is None
    # the same as the command line's dump
    done = subprocess.run(
        [sys.executable, "-m", "journaled", "dump", q.path, "--json", "--key", "cust-1"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    assert [json.loads(line)["id"] for line in done.stdout.splitlines()] == _ids(by_key)


def test_find_needs_the_token_as_every_route(orders) -> None:
    q, _ = orders
    server = StatusServer([q], token="s3cret")
    try:
        base = f"http://127.0.0.1:{server.port}/api/find?key=cust-1"
        assert _get(base)[0] == 401
        assert _get(base + "&token=wrong")[0] == 403
        code, found = _get(base + "&token=s3cret")
        assert code == 200 and len(found["items"]) == 10
    finally:
        server.close()


def test_find_since_starts_at_the_first_id_put_then(orders, page) -> None:
    _q, middle = orders
    for since in (f"{middle:.3f}", time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(middle - 3600))):
        code, found = _find(page, ("since", since), ("limit", "5"))
        assert code == 200
        if since.startswith("20"):  # an hour before: everything
            assert found["first_id"] == 1
            continue
        # bisection over record times: the 100 records before it are never read
        assert found["first_id"] == 101 and found["scanned"] == 5 and _ids(found) == [101, 102, 103, 104, 105]
        assert all(it["at"] >= middle for it in found["items"])
    _, until = _find(page, ("until", f"{middle:.3f}"))
    assert until["items"][-1]["id"] == 100 and len(until["items"]) == 100 and not until["more"]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (("since", "yesterday"), "not a time"),
        (("start", "-1"), "not an item id"),
        (("end", "\u00b2"), "not an item id"),  # a digit to str.isdigit, not to int()
        (("header", "region"), "not NAME=VALUE"),
        (("limit", str(statuspage.FIND_ITEMS + 1)), "limit"),
        (("limit", "-1"), "limit: a whole number"),
        (("queue", "/nowhere"), "no queue served"),
    ],
)
def test_a_wrong_search_is_a_clear_error(page, query: tuple[str, str], message: str) -> None:
    code, body = _find(page, query)
    assert code in (400, 404) and message in body["error"], body


def test_results_are_bounded_in_count_and_bytes_and_go_on_from_next_id(tmp_path) -> None:
    with JournaledQueue(str(tmp_path / "big")) as q:
        q.put_many([b"x"] * 250)
        big = b"h" * 8192
        for i in range(100):  # 100 items of 8 KiB headers: more than MAX_BYTES together
            q.put(b"y", headers={"blob": big, "n": b"%d" % i})
        q.sync()
        server = StatusServer([q], token=None)
        try:
            _, first = _find(server)
            assert len(first["items"]) == statuspage.FIND_ITEMS and first["more"]
            assert first["next_id"] == statuspage.FIND_ITEMS + 1
            _, second = _find(server, ("start", str(first["next_id"])))
            assert _ids(second)[0] == first["next_id"]
            _, heavy = _find(server, ("start", "251"))
            body = json.dumps(heavy)
            assert heavy["more"] and len(body) < statuspage.FIND_BYTES + 2 * len(big)
            assert len(heavy["items"]) < 100
        finally:
            server.close()


def test_a_long_scan_answers_when_its_time_is_up_and_still_gets_on(orders, page, monkeypatch) -> None:
    monkeypatch.setattr(statuspage, "FIND_SECONDS", 0.0)  # the time is up at once
    monkeypatch.setattr(statuspage, "FIND_CHECK_EVERY", 16)  # and looked at every 16 records
    start, seen = 1, []
    for _ in range(10):
        code, part = _find(page, ("header", "region=eu"), ("start", str(start)))
        assert code == 200
        seen += _ids(part)
        if not part["more"]:
            break
        assert part["next_id"] == start + 16 and part["scanned"] == 16  # one batch each time
        start = part["next_id"]
    assert seen == [101 + i for i in range(30) if i % 2]


def test_payloads_only_under_peek_escaped_and_cut(tmp_path) -> None:
    hostile = b"<script>alert(1)</script>\x1b[2J" + b"z" * 400
    with JournaledQueue(str(tmp_path / "q")) as q:
        q.put(hostile, key=b"k")
        q.sync()
        for peek in (False, True):
            server = StatusServer([q], token=None, peek=peek)
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{server.port}/api/find?key=k", timeout=TIMEOUT
                ) as r:
                    raw = r.read()
            finally:
                server.close()
            (item,) = json.loads(raw)["items"]
            if not peek:
                assert "payload" not in item and b"script" not in raw and b"zzz" not in raw
                continue
            # the terminal escape as text, the first PEEK_BYTES only (the page HTML-escapes it)
            assert "\x1b" not in item["payload"] and "\\x1b" in item["payload"]
            assert item["payload"].startswith("<script>") and item["payload_cut"] is True
            assert item["payload"].count("z") < 400


class _Gate:
    """Makes the search's scanner stop after its first record until ``go`` is set."""

    def __init__(self) -> None:
        self.reading, self.go = threading.Event(), threading.Event()


def test_a_search_holds_no_queue_lock_and_changes_nothing(orders, page, monkeypatch) -> None:
    q, _ = orders
    gate = _Gate()

    class SlowScanner(statuspage.JournalScanner):
        def records(self, start_id: int = 0, stop_id: int | None = None) -> Iterator[Put]:
            for k, rec in enumerate(super().records(start_id, stop_id)):
                if k == 1:
                    gate.reading.set()
                    assert gate.go.wait(TIMEOUT)
                yield rec

    def listing() -> list[tuple[str, int, int]]:
        return sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(q.path))

    before_files, before_stats = listing(), q.stats()
    monkeypatch.setattr(statuspage, "JournalScanner", SlowScanner)
    answers: list[tuple[int, Any]] = []
    searching = threading.Thread(target=lambda: answers.append(_find(page, ("key", "cust-2"))))
    searching.start()
    try:
        assert gate.reading.wait(TIMEOUT)
        # mid-scan: the queue takes puts and commits, the page answers, a second search waits its turn
        done = threading.Event()

        def work() -> None:
            q.put(b"while searching")
            billing = q.reader("billing")
            billing.commit(billing.get(block=False))
            done.set()

        threading.Thread(target=work, daemon=True).start()
        assert done.wait(5.0), "a put or commit waited for the search"
        assert _get(f"http://127.0.0.1:{page.port}/api/status")[0] == 200
        code, busy = _find(page, ("key", "cust-0"))
        assert code == 503 and "another search" in busy["error"]
    finally:
        gate.go.set()
        searching.join(TIMEOUT)
    ((code, found),) = answers
    assert code == 200 and _ids(found) == [101 + i for i in range(30) if i % 3 == 2]
    # nothing a search did shows in the directory or the queue (done above by the test itself)
    monkeypatch.undo()
    q.sync()
    after_files, after_stats = listing(), q.stats()
    _find(page, ("key", "cust-1"))
    _find(page, ("since", "0"), ("limit", "3"))
    assert listing() == after_files
    assert [(r.name, r.head, r.backlog_items) for r in q.stats().readers] == [
        (r.name, r.head, r.backlog_items) for r in after_stats.readers
    ]
    assert before_files != after_files and before_stats.next_id + 1 == after_stats.next_id


def test_the_status_has_a_section_for_each_served_queue_open_reads_with_their_client_and_rates(
    tmp_path,
) -> None:
    dead = JournaledQueue(str(tmp_path / "dead"))
    q = JournaledQueue(str(tmp_path / "jobs"))
    q.reader("workers", ReaderConfig(dead_letter=dead))
    q.put_many([b"a", b"b", b"c"])
    holder = subprocess.Popen(  # another process holds a read through this owner
        [
            sys.executable,
            "-c",
            "import sys\nfrom journaled import JournaledQueue\n"
            f"q = JournaledQueue({q.path!r})\nit = q.reader('workers').get(timeout=20)\n"
            "print(it.id, flush=True)\nsys.stdin.readline()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    server = StatusServer([q], token=None)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "1"
        mine = q.reader("workers").get(block=False)
        server.history.take()
        q.put_many([b"d"] * 10)
        q.reader("workers").commit(mine)
        server.history.take()
        code, body = _get(f"http://127.0.0.1:{server.port}/api/status")
    finally:
        server.close()
        holder.communicate("\n", timeout=TIMEOUT)
        q.close()
        dead.close()
    assert code == 200
    jobs, dead_section = body["queues"]
    assert (jobs["stats"]["name"], dead_section["stats"]["name"]) == ("jobs", "dead")
    (read,) = jobs["open_reads"]
    assert (read["reader"], read["id"], read["client"]) == ("workers", 1, holder.pid)
    assert 0 <= read["age"] < TIMEOUT
    a, b = (s for s in body["history"][-2:])
    dt = b["t"] - a["t"]
    assert jobs["rates"]["put_per_s"] == pytest.approx(10 / dt)
    assert jobs["rates"]["commit_per_s"] == {"workers": pytest.approx(1 / dt)}


def test_serve_jobs_dead_shows_both_queues(tmp_path) -> None:
    jobs, dead = str(tmp_path / "jobs"), str(tmp_path / "dead")
    sink = JournaledQueue(dead)
    with JournaledQueue(jobs) as q:
        q.reader("workers", ReaderConfig(dead_letter=sink))  # stored as {"queue": "../dead"}
    sink.close()
    server = subprocess.Popen(
        [sys.executable, "-m", "journaled", "serve", "--http", "0", "--no-token", jobs, dead],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip().removeprefix("status page at ")
        assert server.stdout.readline().startswith("serving ")
        assert server.stdout.readline().startswith("serving ")
        code, body = _get(url.rstrip("/") + "/api/status")
        assert code == 200
        assert [s["stats"]["name"] for s in body["queues"]] == ["jobs", "dead"]
        assert [s["path"] for s in body["queues"]] == [jobs, dead]
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=TIMEOUT) == 0
