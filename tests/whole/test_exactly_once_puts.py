"""Exactly-once puts from other processes (issue 25, point 4): client processes put through an
owner that is killed with SIGKILL midway; each put in flight is made again, with its producer
tag, on the next owner, so every acknowledged put is stored exactly once, none is lost, and no
put reports an unknown outcome.  A few seeded ``qtest put --processes N --kill-owner`` runs
(scripts/soak_kill_owner.py runs 20)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from journaled import JournaledQueue
from journaled.cli.qtest.run import Observations
from journaled.remote import connections
from support.child import Child
from support.paths import ROOT

ENV = dict(os.environ, PYTHONPATH=ROOT)


def kill_owner_run(tmp_path, seed: int, *extra: str) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "journaled",
            "qtest",
            "put",
            "--processes",
            "3",
            "--items",
            "1500",
            "--kill-owner",
            "--seed",
            str(seed),
            "--json",
            "--dir",
            str(tmp_path / f"q{seed}"),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=ENV,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize(("seed", "extra"), [(1, ()), (2, ("--batch", "3")), (3, ("--writers", "2"))])
def test_puts_in_flight_when_the_owner_is_killed_are_stored_exactly_once(tmp_path, seed, extra) -> None:
    r = kill_owner_run(tmp_path, seed, *extra)
    assert r["ok"] is True and r["validation_errors"] == []
    assert r["owner_killed"] is not None and r["owner_after"] is not None
    assert r["lost_acknowledged"] == 0
    assert r["stored_twice"] == 0
    assert r["outcome_unknown"] == 0
    writers = 3 * (2 if "--writers" in extra else 1)
    assert r["put"]["items"] == 1500 // writers * writers  # every put acknowledged


def test_a_put_stored_under_two_ids_is_an_error_even_if_the_killed_owner_handed_it_out() -> None:
    ledger = Observations()
    ledger.add_produced(0, 2, 0)
    log = ledger.new_log("r")
    # seq 0 delivered by the killed owner as id 1, then again as id 3: stored twice, not a
    # redelivery (a redelivery keeps its id)
    log.extend([(1, 0, 0, 0), (2, 0, 1, 0), (3, 0, 0, 0)])
    errors = ledger.validate(ordered_logs=False, may_redeliver=lambda key: key == (0, 0))
    assert any("stored more than once" in e for e in errors), errors
    assert ledger.stored_twice == 1
    redelivery = Observations()
    redelivery.add_produced(0, 2, 0)
    redelivery.new_log("r").extend([(1, 0, 0, 0), (2, 0, 1, 0), (1, 0, 0, 0)])
    assert redelivery.validate(ordered_logs=False, may_redeliver=lambda key: key == (0, 0)) == []
    assert redelivery.stored_twice == 0 and redelivery.redelivered == 1


OWNER = """
import sys
from journaled import JournaledQueue
q = JournaledQueue(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
q.close()
"""


def test_a_lock_file_naming_no_owner_yet_is_a_takeover_in_progress_not_a_planted_socket(
    tmp_path, monkeypatch
) -> None:
    d = str(tmp_path / "q")
    owner = Child(OWNER, d, merge_stderr=True)
    try:
        owner.wait_for_line("ready")
        real = connections._lock_pid
        reads: list[int | None] = []

        def being_written(dir_fd: int) -> int | None:
            # the first reads land between the new owner's ftruncate and its pid's write
            reads.append(None if len(reads) < 3 else real(dir_fd))
            return reads[-1]

        monkeypatch.setattr(connections, "_lock_pid", being_written)
        with JournaledQueue(d) as q:
            assert q.put(b"x") == 1
        assert reads[:3] == [None, None, None] and reads[3] == q.owner_pid
        owner.send("")
        owner.finish()
    finally:
        owner.stop()
