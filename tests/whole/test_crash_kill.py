"""kill -9 harness, CI size: scripts/crash_soak kills a worker owning the queue at random moments
and at named I/O points, restarts it, drains at the end, and counts broken promises."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from support.paths import ROOT

SCRIPT = os.path.join(ROOT, "scripts", "crash_soak")


def run_soak(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, SCRIPT, "--json", *args], capture_output=True, text=True, timeout=600
    )
    assert out.stdout.strip(), out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_kill_minus_nine_cycles_lose_nothing_acknowledged(tmp_path):
    r = run_soak("--cycles", "100", "--seed", "11", "--max-life", "0.15", "--dir", str(tmp_path))
    assert r["kill_cycles"] == 100
    assert r["puts_acked"] > 100  # the workers did real work between kills
    assert r["named_kill_points"] > 0
    assert r["errors"] == []
    assert r["lost"] == 0
    assert r["corrupt"] == 0
    assert r["order_violations"] == 0
    assert r["redelivered_beyond_allowance"] == 0
    assert r["failed_restarts"] == 0


def test_workers_started_as_fresh_interpreters_also_survive_kills(tmp_path):
    r = run_soak("--cycles", "4", "--seed", "3", "--exec", "--min-life", "0.2", "--dir", str(tmp_path))
    assert r["kill_cycles"] == 4 and r["puts_acked"] > 0
    assert (r["lost"], r["corrupt"], r["order_violations"], r["failed_restarts"]) == (0, 0, 0, 0)
    assert r["redelivered_beyond_allowance"] == 0


def test_crash_soak_help_describes_the_long_run():
    out = subprocess.run([sys.executable, SCRIPT, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert "--seed" in out.stdout and "--cycles" in out.stdout and "--powerloss" in out.stdout
