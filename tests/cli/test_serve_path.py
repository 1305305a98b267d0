"""``journaled serve PATH`` serves a queue or an empty directory; a mistyped path or a directory of
other things is refused (one line, exit 2, nothing created) unless ``--create`` asks for a new
queue there (issue 22, point 6)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from journaled import JournaledQueue
from support.paths import ROOT
from support.serving import serve_once

ENV = dict(os.environ, PYTHONPATH=ROOT)


def serve_refused(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "journaled", "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=ENV,
    )
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stdout == "" and "Traceback" not in out.stderr
    assert out.stderr.startswith("journaled serve: ") and out.stderr.count("\n") == 1, out.stderr
    return out.stderr


def test_a_missing_path_is_refused_and_not_created(tmp_path):
    err = serve_refused(str(tmp_path / "qeueu"))
    assert "qeueu: does not exist" in err and "--create" in err
    assert os.listdir(tmp_path) == []


def test_a_directory_of_other_things_is_refused_and_left_alone(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    (d / "app.1").write_bytes(b"a rotated log\n")
    err = serve_refused(str(d))
    assert "holds no journaled queue and is not empty" in err and "--create" in err
    assert os.listdir(d) == ["app.1"]


def test_a_regular_file_is_refused_even_with_create(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_bytes(b"x\n")
    assert "not a directory" in serve_refused("--create", str(f))
    assert f.read_bytes() == b"x\n" and os.listdir(tmp_path) == ["notes.txt"]


def test_every_path_is_checked_before_any_is_served(tmp_path):
    good = tmp_path / "good"
    good.mkdir()
    assert "missing: does not exist" in serve_refused(str(good), str(tmp_path / "missing"))
    assert os.listdir(good) == []  # the good one was not opened either


def test_a_directory_of_several_queues_is_refused(tmp_path):
    d = str(tmp_path / "shared")
    for name in ("alpha", "beta"):
        with JournaledQueue(d, name=name) as q:
            q.put(b"x")
    assert "several queues (alpha, beta)" in serve_refused(d)


@pytest.mark.parametrize(
    "kind", ["queue", "empty directory", "missing with --create", "others with --create"]
)
def test_what_serve_does_serve(tmp_path, kind):
    d = tmp_path / "q"
    args = [str(d)]
    if kind == "queue":
        with JournaledQueue(str(d)) as q:
            q.put(b"kept")
    elif kind == "empty directory":
        d.mkdir()
    elif kind == "others with --create":
        d.mkdir()
        (d / "README").write_text("mine\n")
    if kind.endswith("--create"):
        args.insert(0, "--create")
    assert serve_once(*args).startswith(f"serving {d} (pid ")
    with JournaledQueue(str(d)) as q:
        assert q.is_owner
        if kind == "queue":
            assert q.reader("r").get(block=False).data == b"kept"
    if kind == "others with --create":
        assert (d / "README").read_text() == "mine\n"
