"""Smoke tests of the qtest load tests: each one runs on tiny inputs and validates.

No timing is asserted anywhere; the figures qtest prints are checked only for being present.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from journaled.cli.qtest import main as qtest
from journaled.cli.qtest.run import Observations, check_payload, make_payload
from support.paths import ROOT as PROJECT_ROOT

ROOT = Path(PROJECT_ROOT)

TINY = {
    "put": ["--items", "600", "--threads", "3"],
    "flood": ["--seconds", "0.3", "--writers", "2", "--readers", "2"],
    "timeout": ["--seconds", "0.3", "--writers", "2", "--readers", "6"],
    "fanout": ["--items", "400", "--readers", "3"],
    "leaky-reader": ["--seconds", "0.3", "--readers", "2", "--dying", "2", "--abort-rate", "0.3"],
}


@pytest.mark.parametrize("test", sorted(TINY))
def test_each_qtest_runs_and_validates_on_tiny_inputs(test, tmp_path, capsys):
    argv = [test, *TINY[test], "--size", "20-300", "--dir", str(tmp_path / "q"), "--json"]
    assert qtest.main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] is True and result["validation_errors"] == []
    assert result["put"]["items"] > 0
    readers = result["readers"] if test == "fanout" else 1
    assert result["get"]["items"] == result["put"]["items"] * readers


def test_leaky_reader_redelivers_reads_left_open_by_dead_consumers(tmp_path, capsys):
    argv = ["leaky-reader", "--seconds", "0.3", "--dying", "3", "--dir", str(tmp_path / "q"), "--json"]
    assert qtest.main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["open_at_close"] >= 1
    assert result["replayed_after_reopen"] >= result["open_at_close"]


def test_put_with_sync_always_and_batches_validates(tmp_path, capsys):
    argv = ["put", "--sync", "always", "--items", "300", "--batch", "7", "--dir", str(tmp_path), "--json"]
    assert qtest.main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] and result["fsyncs"] >= 1 and result["batch"] == 7


def test_summary_is_human_readable_and_exit_zero(tmp_path, capsys):
    assert qtest.main(["put", "--items", "200", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "validation: OK" in out and "items/s" in out and "p99.9" in out


def test_payload_roundtrip_detects_a_flipped_byte():
    data = make_payload(3, 17, 100, bytes(range(256)) * 2)
    assert len(data) == 100 and check_payload(data) == (3, 17)
    bad = bytearray(data)
    bad[50] ^= 1
    with pytest.raises(ValueError):
        check_payload(bytes(bad))


def test_ledger_reports_duplicates_losses_and_reordering():
    ledger = Observations()
    ledger.produced = {0: 3}
    log = ledger.new_log("r")
    log.extend([(1, 0, 0, 0), (2, 0, 2, 0), (3, 0, 1, 0), (4, 0, 1, 0)])
    errors = " ".join(ledger.validate(ordered_logs=True))
    assert "duplicate" in errors and "later id" in errors and "after" in errors
    ledger2 = Observations()
    ledger2.produced = {0: 2}
    ledger2.new_log("r").append((1, 0, 0, 0))
    assert any("never delivered" in e for e in ledger2.validate(ordered_logs=True))


def test_failed_validation_gives_exit_status_one(tmp_path, monkeypatch, capsys):
    real = Observations.validate
    monkeypatch.setattr(
        Observations,
        "validate",
        lambda self, ordered_logs, complete=True: real(self, ordered_logs, complete) + ["forced"],
    )
    assert qtest.main(["put", "--items", "50", "--dir", str(tmp_path)]) == 1
    assert "FAILED" in capsys.readouterr().out


def test_scripts_qtest_wrapper_and_cli_run_the_default_shape():
    for cmd in (
        [sys.executable, str(ROOT / "scripts" / "qtest")],
        [sys.executable, "-m", "journaled", "qtest"],
    ):
        out = subprocess.run(
            [*cmd, "fanout", "--items", "100", "--readers", "2", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["ok"] is True


def test_bad_size_is_rejected_with_a_message():
    with pytest.raises(SystemExit):
        qtest.main(["put", "--size", "5"])
