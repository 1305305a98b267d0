"""After Ctrl-C (or with nothing delivered) a qtest summary never says "validation: OK": it says
what was checked and what was not (issue 22, met on the way)."""

from __future__ import annotations

import json

from journaled.cli.qtest import main as qtest
from journaled.cli.qtest.crash import format_crash


def put_result(tmp_path, capsys) -> dict:
    assert qtest.main(["put", "--items", "50", "--dir", str(tmp_path / "q"), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_whole_run_still_says_ok(tmp_path, capsys):
    text = qtest.format_summary(put_result(tmp_path, capsys))
    assert "validation: OK" in text


def test_an_interrupted_run_says_partial_and_what_was_not_checked(tmp_path, capsys):
    r = dict(put_result(tmp_path, capsys), interrupted=True)
    text = qtest.format_summary(r)
    assert "validation: OK" not in text
    assert "validation: PARTIAL" in text and "final drain was skipped" in text
    assert f"checked: the {r['get']['items']} deliveries so far" in text
    assert "not checked: that every acknowledged put was delivered" in text


def test_zero_deliveries_say_nothing_was_checked(tmp_path, capsys):
    r = put_result(tmp_path, capsys)
    r = dict(r, interrupted=True, get=dict(r["get"], items=0))
    text = qtest.format_summary(r)
    assert "validation: OK" not in text
    assert "validation: NOTHING CHECKED (interrupted before any delivery; 0 deliveries)" in text
    r["interrupted"] = False
    assert "validation: NOTHING CHECKED (no delivery to check; 0 deliveries)" in qtest.format_summary(r)


def test_a_failed_interrupted_run_still_says_failed(tmp_path, capsys):
    r = dict(put_result(tmp_path, capsys), interrupted=True, ok=False, validation_errors=["reader x: boom"])
    text = qtest.format_summary(r)
    assert "validation: FAILED (1 problems)" in text and "PARTIAL" not in text


def crash_result(**over) -> dict:
    r = {
        "test": "crash", "seed": 1, "mode": "always", "kill_cycles": 4, "named_kill_points": 1,
        "puts_started": 100, "puts_acked": 90, "gets": 70, "committed": 60, "lost": 0, "corrupt": 0,
        "order_violations": 0, "redelivered_within_allowance": 0, "redelivered_beyond_allowance": 0,
        "failed_restarts": 0, "seconds": 1.0, "errors": [], "interrupted": False, "dir": "/x",
        "dir_kept": False, "ok": True,
    }  # fmt: skip
    r.update(over)
    return r


def test_crash_summary_ok_partial_and_nothing_checked():
    assert "validation: OK" in format_crash(crash_result())
    text = format_crash(crash_result(interrupted=True))
    assert "validation: OK" not in text and "validation: PARTIAL" in text
    assert "the 70 deliveries so far" in text and "not checked: that every acknowledged put" in text
    text = format_crash(crash_result(interrupted=True, gets=0))
    assert "validation: OK" not in text
    assert "NOTHING CHECKED (interrupted before any delivery; 0 deliveries)" in text
