"""Issue 38, point 4: ``stat``, ``top`` and the status page promise the age of the oldest item
not yet *committed*, so a read held open counts: an item read and held for 50 s shows as about
50 s there, not as "-" (which is what the age of the oldest *waiting* item says when nothing
waits).

The owner runs in the test process; its clock (``time`` as ``journaled.queue`` and
``journaled.stats`` see it: what ``stats()`` and ``open_reads()`` read) is moved 50 s ahead
instead of sleeping 50 s: to the owner the read has been open that long."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time as _time
import urllib.request
from typing import Any

import pytest

import journaled.queue
import journaled.stats
from journaled import JournaledQueue
from journaled.cli.statuspage import StatusServer

HELD = 50.0
TIMEOUT = 60.0


class _Later:
    """The ``time`` module, with ``time()`` ``seconds`` ahead."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def time(self) -> float:
        return _time.time() + self.seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(_time, name)


@pytest.fixture
def held_for_50s(tmp_path, monkeypatch):
    """A queue whose only item has been read by ``workers`` and held for 50 s; nothing waits."""
    path = str(tmp_path / "jobs")
    q = JournaledQueue(path)
    workers = q.reader("workers")
    q.put(b"slow job")
    held = workers.get(block=False)
    monkeypatch.setattr(journaled.queue, "time", _Later(HELD))
    monkeypatch.setattr(journaled.stats, "time", _Later(HELD))
    (r,) = q.stats().readers
    assert r.items_waiting == 0 and r.oldest_age is None  # the waiting age has nothing to say
    yield path, q
    monkeypatch.undo()
    workers.release(held)
    q.close()


def _journaled(*args: str) -> str:
    env = dict(os.environ, COLUMNS="200")
    done = subprocess.run(
        [sys.executable, "-m", "journaled", *args], capture_output=True, text=True, timeout=TIMEOUT, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_stat_shows_a_read_held_50s_as_50s_old(held_for_50s) -> None:
    path, _q = held_for_50s
    (reader,) = json.loads(_journaled("stat", "--json", path))["readers"]
    assert reader["oldest_uncommitted_age_s"] is not None, reader
    assert HELD <= reader["oldest_uncommitted_age_s"] < HELD + 20
    text = _journaled("stat", path)
    found = re.search(r"reader workers: .*oldest uncommitted ([0-9.]+) s old", text)
    assert found is not None, text
    assert HELD <= float(found.group(1)) < HELD + 20


def test_top_shows_a_read_held_50s_as_50s_old(held_for_50s) -> None:
    path, _q = held_for_50s
    screen = _journaled("top", "--once", "--interval", "0.1", path)
    header = next(line for line in screen.splitlines() if "READER" in line)
    row = next(line for line in screen.splitlines() if line.strip().startswith("workers"))
    # the columns are right-aligned under their titles
    end = header.index("UNCOMMITTED") + len("UNCOMMITTED")
    age = row[:end].split()[-1]
    assert age.endswith("s") and HELD <= float(age[:-1]) < HELD + 20, screen


def test_the_status_api_gives_a_read_held_50s_as_50s_old_with_the_read_itself(held_for_50s) -> None:
    _path, q = held_for_50s
    server = StatusServer([q], token=None)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/api/status", timeout=TIMEOUT) as r:
            body = json.loads(r.read())
    finally:
        server.close()
    (queue,) = body["queues"]
    (reader,) = queue["stats"]["readers"]
    assert HELD <= reader["oldest_uncommitted_age"] < HELD + 20
    # the page's open reads table is drawn from this: which item, how old, who holds it
    (read,) = queue["open_reads"]
    assert (read["reader"], read["id"], read["client"]) == ("workers", 1, None)
    assert HELD <= read["age"] < HELD + 20
