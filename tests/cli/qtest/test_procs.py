"""`journaled qtest put --processes N [--kill-owner]`: producers and consumers in real processes
using one owner's queue, the owner killed with SIGKILL midway, every acknowledged put checked."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

import pytest

from journaled.cli.qtest.args import add_qtest_arguments, apply_defaults
from journaled.cli.qtest.main import format_summary
from journaled.cli.qtest.procs import Conductor
from journaled.cli.qtest.run import Run
from support.paths import ROOT

ENV = dict(os.environ, PYTHONPATH=ROOT)


def qtest(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "journaled", "qtest", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV,
    )


def test_put_in_three_processes_validates_and_names_them(tmp_path):
    out = qtest("put", "--processes", "3", "--items", "1500", "--dir", str(tmp_path / "q"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "3 processes x 1 writer(s) + 1 consumer" in out.stdout
    assert "processes: 3 workers (clients) + 1 owner process" in out.stdout
    assert "1,500 items" in out.stdout
    assert "validation: OK (exactly once per reader" in out.stdout
    assert "killed" not in out.stdout


def test_kill_owner_midway_loses_no_acknowledged_put(tmp_path):
    out = qtest("put", "--processes", "3", "--items", "3000", "--kill-owner", "--dir", str(tmp_path / "q"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "killed with SIGKILL" in out.stdout and "took over" in out.stdout
    assert "lost acknowledged puts 0;" in out.stdout
    assert "validation: OK (every acknowledged put delivered" in out.stdout


def test_kill_owner_json_figures_with_batches(tmp_path):
    out = qtest(
        "put",
        "--processes",
        "2",
        "--writers",
        "2",
        "--batch",
        "4",
        "--items",
        "2400",
        "--kill-owner",
        "--seed",
        "3",
        "--json",
        "--dir",
        str(tmp_path / "q"),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    r = json.loads(out.stdout)
    assert r["ok"] is True and r["validation_errors"] == []
    assert r["processes"] == 2 and r["writers"] == 4 and r["readers"] == 2
    killed = r["owner_killed"]
    assert killed is not None and killed["pid"] == r["owner_pid"]
    assert r["owner_after"] is not None and r["owner_after"]["pid"] != r["owner_pid"]
    assert r["lost_acknowledged"] == 0
    # every put was acknowledged or reported with an unknown outcome (a batch each at most)
    assert r["put"]["items"] + r["outcome_unknown"] == 2400
    assert r["outcome_unknown"] <= 4 * 4
    assert r["get"]["items"] >= r["put"]["items"]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["put", "--processes", "0"], "--processes"),
        (["put", "--kill-owner"], "--kill-owner needs --processes"),
        (["flood", "--processes", "2"], "--processes"),
        (["crash", "--kill-owner"], "--kill-owner"),
    ],
)
def test_bad_process_options_are_usage_errors(argv, words):
    out = qtest(*argv)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert words in out.stderr and "Traceback" not in out.stderr
    assert out.stdout == ""


# ---------------------------------------------------------------- the check itself, no processes
MADE: list[Conductor] = []


@pytest.fixture(autouse=True)
def _remove_ledger_dirs():
    yield
    while MADE:
        shutil.rmtree(MADE.pop().ledgers, ignore_errors=True)


def conductor(tmp_path, *extra: str) -> Conductor:
    parser = argparse.ArgumentParser()
    add_qtest_arguments(parser)
    args = parser.parse_args(["put", "--processes", "2", "--dir", str(tmp_path / "q"), *extra])
    apply_defaults(args, "put")
    MADE.append(Conductor(Run(args)))
    return MADE[-1]


def write_ledger(
    c: Conductor,
    k: int,
    produced: dict[int, int],
    log: list[list[int]],
    unknown: dict[int, list[int]] | None = None,
) -> None:
    data = {
        "produced": produced,
        "put_bytes": 0,
        "latencies": [],
        "unknown": unknown or {},
        "log": log,
        "bad_payloads": [],
        "failures": [],
        "gets": len(log),
        "timeouts": 0,
        "leftovers": 0,
        "commits_refused": 0,
        "is_owner": False,
        "pid": 1,
    }
    with open(os.path.join(c.ledgers, f"ledger-{k}.json"), "w") as f:
        json.dump(data, f)


def check(c: Conductor, killed: bool) -> list[str]:
    pre, _figures = c.merge()
    return c.run.ledger.validate(ordered_logs=True, may_redeliver=pre.__contains__ if killed else None)


def test_an_acknowledged_put_no_reader_saw_is_reported_lost(tmp_path):
    c = conductor(tmp_path)
    # worker 0 says producer 0 had seqs 0..2 acknowledged; the readers saw only 0 and 1
    write_ledger(c, 0, {0: 3}, [[1, 0, 0, 0, 0], [2, 0, 1, 0, 0]])
    write_ledger(c, 1, {1: 1}, [[3, 1, 0, 0, 0]])
    errors = check(c, killed=False)
    assert any("1 items never delivered" in e for e in errors), errors
    assert c.run.ledger.missing == 1
    # the same gap is a loss with a killed owner too: only an unknown outcome excuses it
    c2 = conductor(tmp_path)
    write_ledger(c2, 0, {0: 3}, [[1, 0, 0, 0, 1], [2, 0, 1, 0, 1]])
    write_ledger(c2, 1, {1: 1}, [[3, 1, 0, 0, 1]])
    assert any("never delivered" in e for e in check(c2, killed=True))
    c3 = conductor(tmp_path)
    write_ledger(c3, 0, {0: 3}, [[1, 0, 0, 0, 1], [2, 0, 1, 0, 1]], unknown={0: [2]})
    write_ledger(c3, 1, {1: 1}, [[3, 1, 0, 0, 1]])
    assert check(c3, killed=True) == [] and c3.run.ledger.missing == 0


def test_only_items_the_killed_owner_handed_out_may_come_twice(tmp_path):
    # seq 0 was delivered by the first owner (flag 1) and again after the kill: allowed, counted
    c = conductor(tmp_path)
    write_ledger(c, 0, {0: 2}, [[1, 0, 0, 0, 1], [2, 0, 1, 0, 0]])
    write_ledger(c, 1, {}, [[1, 0, 0, 0, 0]])
    assert check(c, killed=True) == []
    assert c.run.ledger.redelivered == 1
    # seq 1 twice, both after the kill: a broken promise
    c2 = conductor(tmp_path)
    write_ledger(c2, 0, {0: 2}, [[1, 0, 0, 0, 1], [2, 0, 1, 0, 0]])
    write_ledger(c2, 1, {}, [[2, 0, 1, 0, 0]])
    assert any("duplicate" in e for e in check(c2, killed=True))
    # and without a kill no duplicate at all is allowed
    c3 = conductor(tmp_path)
    write_ledger(c3, 0, {0: 2}, [[1, 0, 0, 0, 1], [2, 0, 1, 0, 0]])
    write_ledger(c3, 1, {}, [[1, 0, 0, 0, 1]])
    assert any("duplicate" in e for e in check(c3, killed=False))


def test_an_id_delivered_with_two_payloads_is_an_error_even_for_a_put_of_unknown_outcome(tmp_path):
    # seq 1's put had an unknown outcome and the first owner delivered it as id 2; if the next
    # owner gave id 2 to seq 2, an item another process held was unmade: a broken promise
    c = conductor(tmp_path)
    write_ledger(c, 0, {0: 3}, [[1, 0, 0, 0, 1], [2, 0, 1, 0, 1], [2, 0, 2, 0, 0]], unknown={0: [1]})
    write_ledger(c, 1, {}, [])
    assert any("two payloads" in e for e in check(c, killed=True))
    c2 = conductor(tmp_path)
    write_ledger(c2, 0, {0: 3}, [[1, 0, 0, 0, 1], [2, 0, 1, 0, 1], [2, 0, 2, 0, 0]])
    write_ledger(c2, 1, {}, [])
    assert any("two payloads" in e for e in check(c2, killed=True))


def test_an_interrupted_processes_run_shows_what_it_counted_and_no_zeros_it_never_measured(tmp_path):
    # The workers report bytes and latencies in their ledgers at the end; Ctrl-C stops them
    # first, so the run has only their progress counts: it must say so, not print 0 B, 0 us.
    import signal
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "journaled", "qtest", "put", "--processes", "2", "--items", "500000"]
        + ["--json", "--no-progress", "--dir", str(tmp_path / "q")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        start_new_session=True,  # a Ctrl-C reaches the whole group, as in a terminal
    )
    time.sleep(4)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    r = json.loads(out.strip().splitlines()[-1])
    assert r["interrupted"] and r["put"]["items"] > 0, r["put"]
    assert r["put"]["bytes"] is None and set(r["put"]["latency_us"].values()) == {None}
    assert "not_measured" in r
    text = format_summary(r)
    assert "not measured" in text and "validation: NOTHING CHECKED (interrupted" in text, text
