"""``journaled config PATH reader R --dead-letter DIR`` (and ``--expire-to``, and ``--from
FILE``) refuses a DIR that holds other things and no queue (a typo: ``--dead-letter ~``), as
``serve`` and every other command refuse such a path: one line, exit 2, nothing stored and
nothing created there (issue 35, point 9).  A queue, an empty directory and a missing one (the
owner opens it once it exists) are taken."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest

from journaled import JournaledQueue
from support.paths import ROOT

ENV = dict(os.environ, PYTHONPATH=ROOT)


def _config(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "journaled", "config", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )


@pytest.mark.parametrize("option", ["--dead-letter", "--expire-to", "--from"])
def test_a_destination_that_holds_other_things_is_refused_and_left_alone(tmp_path, option) -> None:
    jobs, home = str(tmp_path / "jobs"), tmp_path / "home"
    with JournaledQueue(jobs) as q:
        q.reader("r")
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    before = sorted(os.listdir(home))
    if option == "--from":
        settings = tmp_path / "settings.json"
        settings.write_text(json.dumps({"dead_letter": str(home)}))
        out = _config(jobs, "reader", "r", "--from", str(settings))
    else:
        out = _config(jobs, "reader", "r", option, str(home))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, (out.returncode, out.stdout, out.stderr)
    assert "holds no journaled queue" in out.stderr
    assert sorted(os.listdir(home)) == before
    with JournaledQueue(jobs) as q:
        assert q.reader_settings("r")["dead_letter"] is None and q.reader_settings("r")["expire_to"] is None


@pytest.mark.parametrize("kind", ["queue", "empty", "missing"])
def test_a_queue_an_empty_or_a_missing_directory_is_taken(tmp_path, kind) -> None:
    jobs, dead = str(tmp_path / "jobs"), str(tmp_path / "dead")
    with JournaledQueue(jobs) as q:
        q.reader("r")
    if kind == "queue":
        JournaledQueue(dead).close()
    elif kind == "empty":
        os.mkdir(dead)
    out = _config(jobs, "reader", "r", "--dead-letter", dead)
    assert out.returncode == 0, out.stderr
    with warnings.catch_warnings():  # a missing destination: the reader runs without it, and says so
        warnings.simplefilter("ignore" if kind == "missing" else "error")
        with JournaledQueue(jobs) as q:
            assert q.reader_settings("r")["dead_letter"] == {"queue": "../dead"}
