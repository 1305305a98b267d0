"""An entry of ``external/`` that is not a regular file (a FIFO here) is skipped by the owner's
archiving without blocking it (tests/disk/test_fifo_names.py), and it is visible, not only a log
line (issue 35): ``Health.skipped_entries`` names it (escaped as a terminal may show it) and
``ok`` is False; ``journaled stat`` says so in text and JSON; the metrics have a gauge; and the
flag goes at the first archiving pass after the entry is removed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from prometheus_client import CollectorRegistry, generate_latest

from journaled import JournaledQueue
from journaled.metrics import QueueCollector
from support.paths import ROOT

TIMEOUT = 120
ENV = dict(os.environ, PYTHONPATH=ROOT)
# a name that would retitle the terminal of whoever inspects the queue, were it printed raw
HOSTILE = "spy\x1b]0;pwned\x07"
SHOWN = "spy\\x1b]0;pwned\\x07"


def _stat(path: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "journaled", "stat", path, *extra],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=ENV,
    )


def test_a_fifo_in_external_is_named_in_health_and_makes_it_not_ok(tmp_path) -> None:
    path = str(tmp_path / "jobs")
    with JournaledQueue(path) as q:
        q.reader("r")
        q.put(b"a")
        os.makedirs(os.path.join(path, "external"), exist_ok=True)
        os.mkfifo(os.path.join(path, "external", HOSTILE))
        q.archive()
        health = q.stats().health
        assert health.skipped_entries == (SHOWN,), health
        assert not health.ok, health
        os.unlink(os.path.join(path, "external", HOSTILE))
        q.archive()
        health = q.stats().health
    assert health.skipped_entries == () and health.ok, health


def test_journaled_stat_shows_the_skipped_entry_escaped_in_text_and_json(tmp_path) -> None:
    path = str(tmp_path / "jobs")
    with JournaledQueue(path) as q:
        q.reader("r")
        q.put(b"a")
        os.makedirs(os.path.join(path, "external"), exist_ok=True)
        os.mkfifo(os.path.join(path, "external", HOSTILE))
        q.archive()
        text = _stat(path)
        as_json = _stat(path, "--json")
    assert text.returncode == 0 and as_json.returncode == 0, text.stderr + as_json.stderr
    assert "\x1b" not in text.stdout and "\x07" not in text.stdout
    health = [line for line in text.stdout.splitlines() if line.strip().startswith("health:")]
    assert health == [
        f"  health: entries of external/ skipped, not regular files (no bookmark read): {SHOWN}"
    ], text.stdout
    owner_health = json.loads(as_json.stdout)["owner"]["health"]
    assert owner_health["skipped_entries"] == [SHOWN] and owner_health["ok"] is False, owner_health


def test_the_metrics_count_skipped_entries_and_the_queue_is_not_healthy(tmp_path) -> None:
    path = str(tmp_path / "jobs")
    with JournaledQueue(path) as q:
        q.reader("r")
        registry = CollectorRegistry()
        registry.register(QueueCollector([q]))
        before = generate_latest(registry).decode()
        os.makedirs(os.path.join(path, "external"), exist_ok=True)
        os.mkfifo(os.path.join(path, "external", "spy"))
        q.archive()
        after = generate_latest(registry).decode()
    assert 'journaled_queue_skipped_entries{queue="jobs"} 0.0' in before
    assert 'journaled_queue_healthy{queue="jobs"} 1.0' in before
    assert 'journaled_queue_skipped_entries{queue="jobs"} 1.0' in after
    assert 'journaled_queue_healthy{queue="jobs"} 0.0' in after
