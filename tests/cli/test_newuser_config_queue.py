"""``journaled config PATH queue --compression ...`` beside a running owner is refused with a
message about what was asked (compression), saying what to do; nothing is stored."""

from __future__ import annotations

import subprocess
import sys

from journaled import JournaledQueue


def config(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "journaled", "config", *args], capture_output=True, text=True, timeout=120
    )


def test_compression_beside_a_running_owner_is_refused_naming_compression(tmp_path) -> None:
    jobs = str(tmp_path / "jobs")
    with JournaledQueue(jobs) as q:  # this process owns it: the command is a client
        q.reader("r")
        run = config(jobs, "queue", "--compression", "zstd")
        assert run.returncode == 1, (run.stdout, run.stderr)
        assert "compression" in run.stdout and "stop the owner" in run.stdout, run.stdout
        assert "QueueConfig(compression=" in run.stdout, run.stdout
    assert "compression: none" in config(jobs).stdout


def test_retention_beside_a_running_owner_is_refused_naming_retention(tmp_path) -> None:
    jobs = str(tmp_path / "jobs")
    with JournaledQueue(jobs) as q:
        q.reader("r")
        run = config(jobs, "queue", "--retention-age", "60")
        assert run.returncode == 1 and "retention" in run.stdout and "compression" not in run.stdout, (
            run.stdout
        )
