"""`journaled qtest` through a real process: Ctrl-C, bad arguments, tests that must end, an existing
queue directory, the drain's progress bar and a summary in words."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time

import pytest

from support.paths import ROOT

ENV = dict(os.environ, PYTHONPATH=ROOT)


def qtest(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "journaled", "qtest", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV,
    )


def journal_files(path: str) -> list[str]:
    return [e for e in os.listdir(path) if e.rsplit(".", 1)[-1].isdigit()] if os.path.isdir(path) else []


@pytest.mark.parametrize(
    "argv",
    [
        ["put", "--items", "50000000", "--size", "20"],
        ["flood", "--seconds", "600"],
        ["leaky-reader", "--seconds", "600"],
    ],
    ids=["put", "flood", "leaky-reader"],
)
def test_ctrl_c_stops_cleanly_with_a_partial_summary_and_exit_130(tmp_path, argv):
    qdir = str(tmp_path / "q")
    proc = subprocess.Popen(
        [sys.executable, "-m", "journaled", "qtest", *argv, "--dir", qdir],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        deadline = time.monotonic() + 60
        while not journal_files(qdir) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # well into the run
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # never leave a 600-second run behind a failed test
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and "Exception" not in err, err
    assert "interrupted" in out
    assert "put " in out and "items/s" in out  # what it measured so far
    assert "FAILED" not in out  # what was delivered before Ctrl-C was checked and is fine


@pytest.mark.parametrize(
    "argv, words",
    [
        (["put", "--items", "0"], "--items"),
        (["put", "--items", "-5"], "--items"),
        (["flood", "--readers", "0"], "--readers"),
        (["flood", "--seconds", "-1"], "--seconds"),
        (["put", "--journal-size", "0"], "--journal-size"),
        (["put", "--journal-size", "0.00001"], "--journal-size"),  # a 10-byte journal file
        (["put", "--reader-memory", "0"], "--reader-memory"),
        (["put", "--batch", "0"], "--batch"),
        (["leaky-reader", "--abort-rate", "1.5"], "--abort-rate"),
        (["put", "--readers", "3"], "--readers"),
        (["flood", "--items", "100"], "--items"),
        (["fanout", "--writers", "3"], "--writers"),
        (["put", "--abort-rate", "0.5"], "--abort-rate"),
        (["crash", "--cycles", "0"], "--cycles"),
        (["put", "--cycles", "3"], "--cycles"),
    ],
)
def test_bad_arguments_are_usage_errors_with_exit_2(argv, words):
    out = qtest(*argv, "--json")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    assert out.stdout == ""
    assert words in out.stderr


def test_leaky_reader_that_aborts_every_read_still_ends(tmp_path):
    out = qtest(
        "leaky-reader",
        "--abort-rate",
        "1.0",
        "--seconds",
        "0.3",
        "--dir",
        str(tmp_path / "q"),
        "--json",
        timeout=90,
    )
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["ok"] and r["get"]["aborts"] > 0


@pytest.mark.parametrize("second", ["fanout", "leaky-reader", "put"])
def test_dir_on_an_existing_queue_does_not_report_a_false_failure(tmp_path, second):
    qdir = str(tmp_path / "q")
    first = qtest("put", "--items", "300", "--dir", qdir, "--json")
    assert first.returncode == 0, first.stdout
    args = {"fanout": ["--items", "300"], "leaky-reader": ["--seconds", "0.3"], "put": ["--items", "300"]}
    again = qtest(second, *args[second], "--dir", qdir, "--json")
    r = json.loads(again.stdout)
    assert again.returncode == 0 and r["ok"], r["validation_errors"]
    assert r["get"]["items"] > 0


def run_on_a_terminal(argv: list[str], timeout: float = 120) -> tuple[int, str]:
    """Run with stderr on a pseudo-terminal (where progress bars show); return (rc, stderr)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a real width
    proc = subprocess.Popen(
        [sys.executable, "-m", "journaled", "qtest", *argv],
        stdout=subprocess.DEVNULL,
        stderr=slave,
        env=ENV,
    )
    os.close(slave)
    chunks = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        r, _, _ = select.select([master], [], [], 0.1)
        if r:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc.wait(timeout=30), b"".join(chunks).decode(errors="replace")


def test_the_drain_phase_has_a_progress_bar_too(tmp_path):
    rc, err = run_on_a_terminal(["put", "--items", "20000", "--size", "20", "--dir", str(tmp_path / "q")])
    assert rc == 0, err
    assert "put" in err and "drain" in err


def test_summary_says_fsync_in_words_and_where_the_queue_was(tmp_path):
    qdir = str(tmp_path / "q")
    out = qtest("put", "--items", "200", "--dir", qdir)
    assert out.returncode == 0
    assert "fsync every 50 ms" in out.stdout and "sync=" not in out.stdout
    assert f"queue directory: {qdir} (kept)" in out.stdout
    out = qtest("put", "--items", "200", "--sync", "always")
    assert "fsync on every put" in out.stdout
    assert "queue directory: " in out.stdout and "(removed)" in out.stdout
    out = qtest("put", "--items", "200", "--sync", "never")
    assert "no fsync" in out.stdout
