"""`journaled qtest crash` and the main job: a real child process killed with SIGKILL over and
over, every acknowledged put checked after each restart and at the end."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

from journaled import JournaledQueue, QueueConfig
from journaled.cli.qtest.crash import Tally, final_check
from journaled.cli.qtest.crash_worker import QUEUE, payload
from journaled.disk.dirlock import owner_pid
from support.paths import ROOT

ENV = dict(os.environ, PYTHONPATH=ROOT)


def qtest(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "journaled", "qtest", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV,
    )


def test_crash_kills_a_real_child_and_every_acknowledged_put_survives(tmp_path):
    out = qtest("crash", "--cycles", "12", "--seed", "5", "--dir", str(tmp_path / "q"), "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    r = json.loads(out.stdout)
    assert r["test"] == "crash" and r["ok"] is True and r["errors"] == []
    assert r["kill_cycles"] == 12
    assert r["puts_acked"] > 12  # the child did real work between kills
    assert r["gets"] > 0 and r["committed"] > 0
    assert (r["lost"], r["corrupt"], r["order_violations"], r["failed_restarts"]) == (0, 0, 0, 0)
    assert r["redelivered_beyond_allowance"] == 0


def test_the_final_check_counts_an_acknowledged_put_that_is_missing(tmp_path):
    # the checker is not vacuous: an ack the queue does not hold is reported lost
    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(sync="always"), name=QUEUE) as q:
        q.reader("c")
        q.reader("fan")
        ids = q.put_many([payload(s, random.Random(s)) for s in (1, 2)])
    tally = Tally()
    tally.acked = {ids[0]: 1, ids[1]: 2, ids[1] + 1: 3}
    final_check(path, tally)
    assert tally.lost == 2  # missing for reader c and for reader fan
    assert tally.corrupt == 0 and tally.order == 0


def test_crash_summary_names_the_promise_and_the_directory():
    out = qtest("crash", "--cycles", "3")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "killed with SIGKILL 3 times" in out.stdout
    assert "every acknowledged put delivered" in out.stdout
    assert "queue directory: " in out.stdout and "(removed)" in out.stdout


def test_ctrl_c_during_crash_exits_130_and_leaves_no_child_holding_the_queue(tmp_path):
    qdir = str(tmp_path / "q")
    proc = subprocess.Popen(
        [sys.executable, "-m", "journaled", "qtest", "crash", "--cycles", "100000", "--dir", qdir],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while owner_pid(qdir) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole group
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # never leave it running after a failure
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and "Traceback" not in out
    assert "interrupted after" in out and "killed with SIGKILL" in out
    assert owner_pid(qdir) is None  # the child was ended, not left running


def test_the_main_job_runs_put_then_a_crash_run(tmp_path):
    out = qtest("--items", "3000", "--cycles", "3", "--dir", str(tmp_path / "q"), "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    put, crash = (json.loads(line) for line in out.stdout.splitlines())
    assert put["test"] == "put" and put["ok"] and put["put"]["items"] == 3000
    assert crash["test"] == "crash" and crash["ok"] and crash["kill_cycles"] == 3
    assert crash["mode"] == "mixed"


def test_main_job_text_shows_both_summaries(tmp_path):
    out = qtest("--items", "2000", "--cycles", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.index("qtest put:") < out.stdout.index("qtest crash:")
    assert out.stdout.count("validation: OK") == 2
