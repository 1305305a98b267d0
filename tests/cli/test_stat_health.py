"""``journaled stat`` says why a live owner's queue is not healthy."""

import subprocess
import sys

from journaled import JournaledQueue
from journaled.stats import POISON_ERRORS

TIMEOUT = 120


def test_stat_names_a_reader_held_by_a_poison_item(tmp_path):
    d = str(tmp_path / "q")
    with JournaledQueue(d) as q:
        r = q.reader("jobs")
        q.put(b"poison")
        for _ in range(POISON_ERRORS + 1):
            r.abort(r.get(timeout=30))
        assert q.stats().health.poison_readers == ("jobs",)
        text = subprocess.run(
            [sys.executable, "-m", "journaled", "stat", d], capture_output=True, text=True, timeout=TIMEOUT
        )
    assert text.returncode == 0, text.stderr
    health = [line for line in text.stdout.splitlines() if line.strip().startswith("health:")]
    assert health == ["  health: held by a poison item (its head failed again and again): jobs"], text.stdout
