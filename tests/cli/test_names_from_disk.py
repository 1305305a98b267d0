"""What a command finds on disk is input (issue 35, points 5, 7 and 8): a name taken from a
directory entry is printed escaped by ``journaled stat`` (as ``top``, ``dump`` and
``dead-letters`` print theirs: cli/inspection.py's ``escape``); a file name in ``external/`` that
is not UTF-8 never fails a metrics scrape (of its queue or of another); and ``dead-letters``
lists an envelope whose times no date can show, and every one after it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from journaled import JournaledQueue
from journaled.deadletter import DeadLetter
from journaled.disk.bookmarks import write_bookmark
from support.paths import ROOT

ENV = dict(os.environ, PYTHONPATH=ROOT)
HOSTILE = "\x1b]0;pwned\x07\x1b[2J"  # retitles, then clears, a terminal


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "journaled", *args], capture_output=True, text=True, timeout=120, env=ENV
    )


def test_stat_prints_every_name_it_found_on_disk_escaped(tmp_path) -> None:
    path = str(tmp_path / f"jobs{HOSTILE}")
    with JournaledQueue(path, name="jobs") as q:
        q.put(b"a")
    write_bookmark(path, "spark", 1)
    external = os.path.join(path, "external")
    shutil.copy(os.path.join(external, "spark"), os.path.join(external, f"spy{HOSTILE}"))
    with open(os.path.join(path, f"jobs.1{HOSTILE}.damaged"), "wb") as f:
        f.write(b"kept aside")
    out = _cli("stat", path)
    assert out.returncode == 0, out.stderr
    raw = [c for c in ("\x1b", "\x07") if c in out.stdout]
    assert not raw, f"stat printed {raw} raw:\n{out.stdout!r}"
    assert out.stdout.count("\\x1b]0;pwned\\x07\\x1b[2J") == 3, out.stdout  # the path, spy, .damaged


def test_a_name_in_external_that_is_not_utf8_never_fails_a_scrape(tmp_path) -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    from journaled.metrics import QueueCollector

    odd, other = str(tmp_path / "odd"), str(tmp_path / "other")
    with JournaledQueue(odd) as a, JournaledQueue(other) as b:
        a.put(b"x")
        b.reader("r")
        write_bookmark(odd, "spark", 1)
        external = os.fsencode(os.path.join(odd, "external"))
        shutil.copy(os.path.join(external, b"spark"), os.path.join(external, b"spy\xff\xfe"))
        registry = prometheus_client.CollectorRegistry()
        registry.register(QueueCollector([a, b]))
        text = prometheus_client.generate_latest(registry).decode()
    assert 'journaled_reader_backlog_items{queue="other",reader="r"}' in text
    assert 'journaled_bookmark_head{bookmark="spark",queue="odd"}' in text
    assert 'bookmark="spy\\\\xff\\\\xfe"' in text  # the name shown, escaped as stat shows it


def test_dead_letters_lists_an_envelope_whose_times_no_date_can_show_and_those_after_it(tmp_path) -> None:
    path = str(tmp_path / "dead")
    with JournaledQueue(path) as q:
        for i, when in enumerate([1e300, -1e300, float("inf"), float("nan"), 1_700_000_000.0]):
            q.put(
                DeadLetter(i + 1, b"payload", when, when, 1, "rejected", f"why {i}", "workers", None).encode()
            )
    for mode in ([], ["--json"]):
        out = _cli("dead-letters", path, *mode)
        assert out.returncode == 0 and "Traceback" not in out.stderr, (mode, out.stderr[-2000:])
        assert all(f"why {i}" in out.stdout for i in range(5)), out.stdout
    assert out.stdout.count("\n") == 5


def test_figures_one_queue_cannot_report_never_fail_the_scrape_of_another(tmp_path) -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    from journaled.metrics import QueueCollector

    class Broken:  # its figures are not what a queue's are (a foreign object, a bug)
        name, closed, path = "broken", False, str(tmp_path)

        def stats(self) -> object:
            return object()

    with JournaledQueue(str(tmp_path / "fine")) as q:
        q.reader("r")
        registry = prometheus_client.CollectorRegistry()
        registry.register(QueueCollector([Broken(), q]))  # type: ignore[list-item]
        text = prometheus_client.generate_latest(registry).decode()
    assert 'journaled_reader_backlog_items{queue="fine",reader="r"}' in text
    assert 'journaled_queue_up{queue="broken"} 0.0' in text
