"""`journaled qtest --compression zstd --keys N --key-order`: every test can compress its queue and
key its items, and with key order the consumers check the key-order promises while they compete
(issue 39's features under load)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from journaled.cli.qtest import main as qtest
from journaled.cli.qtest.args import apply_defaults
from journaled.cli.qtest.crash import Tally
from journaled.cli.qtest.keys import KeyOrderCheck, check_intervals
from journaled.cli.qtest.run import Run
from journaled.config import ReaderConfig
from journaled.format import compressed
from support.paths import ROOT

ENV = dict(os.environ, PYTHONPATH=ROOT)


def run_json(argv: list[str], capsys) -> dict:
    status = qtest.main([*argv, "--json"])
    result = json.loads(capsys.readouterr().out)
    assert status == (0 if result["ok"] else 1)
    return result


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "journaled", "qtest", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=ENV,
    )


@pytest.mark.parametrize(
    "test, extra",
    [
        ("put", ["--items", "1500", "--threads", "3"]),
        ("flood", ["--seconds", "0.4", "--readers", "4"]),
        ("timeout", ["--seconds", "0.3", "--readers", "6"]),
        ("fanout", ["--items", "600", "--readers", "3"]),
        ("leaky-reader", ["--seconds", "0.3", "--readers", "3", "--dying", "2", "--abort-rate", "0.3"]),
    ],
)
def test_every_threaded_test_runs_compressed_and_key_ordered(test, extra, tmp_path, capsys):
    argv = [test, *extra, "--batch", "10", "--compression", "zstd", "--keys", "7", "--key-order"]
    r = run_json([*argv, "--size", "20-400", "--dir", str(tmp_path / "q")], capsys)
    assert r["ok"] is True and r["validation_errors"] == []
    assert (r["compression"], r["keys"]) == ("zstd", 7)
    assert r["key_order"]["checked"] >= r["get"]["items"] > 0  # every delivery carried a key
    assert r["key_order"]["concurrent"] == r["key_order"]["out_of_order"] == 0
    assert r["disk"]["peak_bytes"] > 0


def test_keys_without_key_order_only_key_the_items(tmp_path, capsys):
    r = run_json(["flood", "--seconds", "0.3", "--keys", "3", "--dir", str(tmp_path / "q")], capsys)
    assert r["ok"] and r["keys"] == 3 and r["key_order"] is None
    assert "keys  3 (reader without key order: not checked)" in qtest.format_summary(r)


def test_compressed_units_take_fewer_bytes_on_disk_than_plain_records(tmp_path, capsys):
    # qtest's bodies are slices of one random filler: alike across a batch, so a unit compresses
    common = ["put", "--items", "3000", "--batch", "100", "--size", "1024", "--threads", "2"]
    plain = run_json([*common, "--dir", str(tmp_path / "plain")], capsys)
    packed = run_json([*common, "--compression", "zstd", "--dir", str(tmp_path / "zstd")], capsys)
    assert plain["ok"] and packed["ok"]
    assert plain["disk"]["peak_bytes"] >= plain["disk"]["payload_bytes"]  # all items were on disk
    assert packed["disk"]["peak_bytes"] < plain["disk"]["peak_bytes"] / 4
    assert "compression zstd" in qtest.format_summary(packed)


def flood_args(tmp_path) -> argparse.Namespace:
    """``qtest flood --readers 6 --seconds 0.5 --size 4096 --keys 2 --key-order``, parsed."""
    args = argparse.Namespace(
        test="flood", writers=None, readers=6, items=None, seconds=0.5, size=(4096, 4096), batch=None,
        sync=None, journal_size=None, reader_memory=None, pause=None, get_timeout=None,
        abort_rate=None, dying=None, cycles=None, processes=None, kill_owner=None, seed=1,
        dir=str(tmp_path / "q"), keep=False, json=True, no_progress=True,
        compression=None, keys=2, key_order=True,
    )  # fmt: skip
    apply_defaults(args, "flood")
    return args


def test_the_key_order_check_catches_a_reader_that_does_not_keep_key_order(tmp_path):
    # --key-order claimed, but the reader made without it: consumers compete over two keys and
    # the live check must see two items of one key open at once
    run = Run(flood_args(tmp_path))
    assert run.keycheck is not None and run.reader_config.key_order
    run.reader_config = ReaderConfig(max_memory=run.reader_config.max_memory)  # key order off
    with run.open() as q:
        qtest.test_flood(run, q)
    assert run.keycheck.concurrent > 0, run.keycheck.figures()
    assert run.keycheck.errors()[0].startswith("key order: ")


def test_the_key_order_check_counts_planted_violations():
    check = KeyOrderCheck()
    check.got("r", b"k1", 5)
    check.got("r", b"k1", 7)  # 5 still open
    check.release("r", b"k1", 7)
    check.got("r", b"k1", 6)  # after 7
    check.release("r", b"k1", 6)
    check.got("r", b"k1", 6)  # an abort brings the same id back: allowed
    check.got("r2", b"k1", 1)  # another reader has an order of its own
    check.got("r", None, 2)  # no key: nothing to check
    assert (check.concurrent, check.out_of_order, check.checked) == (1, 1, 5)
    assert len(check.errors()) == 1 + 2  # the count, then one example per violation
    # across processes: intervals (got, released, key, id) on one clock
    cross = KeyOrderCheck()
    check_intervals("r", [(1.0, 2.0, b"a", 1), (2.0, 3.0, b"a", 2), (2.5, 2.6, b"b", 3)], cross)
    assert cross.errors() == []  # a release and a get at one instant: the release first
    check_intervals("r", [(4.0, 6.0, b"a", 3), (5.0, 5.5, b"a", 4)], cross)
    assert cross.concurrent == 1


def test_the_crash_tally_counts_a_key_delivered_twice_or_passed_across_a_restart():
    tally = Tally(key_order=True)
    life: dict = {"ready_at": 0.0, "last_got": 0}
    for line in ("A 7 7", "A 8 8", "G 7 7 1 k", "G 8 8 1 k", "C 8", "D 8"):  # 7 never committed
        tally.event(line.split(), life)
    assert tally.key_concurrent == 1
    restarted: dict = {"ready_at": 0.0, "last_got": 0}
    tally.event("G 7 7 1 k".split(), restarted)  # comes back after 8 of its key was committed
    assert tally.order == 1
    tally.event("G 8 8 1 k".split(), restarted)  # a replay of a committed item: allowed
    assert (tally.order, tally.key_concurrent) == (1, 2)  # 7 still open in this life
    # an item got but never acknowledged may be lost in the kill and its id reused: no proof
    lost = Tally(key_order=True)
    for line in ("G 5 5 1 k", "C 5", "D 5"):  # put seq 5 was never acknowledged
        lost.event(line.split(), {"ready_at": 0.0, "last_got": 0})
    for line in ("A 9 4", "A 10 5", "G 4 9 1 k"):  # the next life reuses ids 4 and 5
        lost.event(line.split(), {"ready_at": 0.0, "last_got": 0})
    assert lost.order == 0 and lost.errors == []


def test_key_order_needs_keys_and_compression_needs_a_binding(tmp_path, capsys, monkeypatch):
    with pytest.raises(SystemExit) as exit_:
        qtest.main(["put", "--key-order", "--dir", str(tmp_path / "a")])
    assert exit_.value.code == 2 and "--key-order needs --keys N" in capsys.readouterr().err
    monkeypatch.setattr(compressed, "zstd", None)
    with pytest.raises(SystemExit) as exit_:
        qtest.main(["crash", "--compression", "zstd", "--dir", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "pip install 'journaled[zstd]'" in err and "Traceback" not in err
    assert not (tmp_path / "b").exists()  # nothing ran


def test_put_across_processes_checks_key_order_and_compresses():
    out = cli("put", "--processes", "2", "--items", "1200", "--batch", "10", "--keys", "4", "--key-order",
              "--compression", "zstd", "--json")  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    r = json.loads(out.stdout)
    assert r["ok"] and r["processes"] == 2 and r["compression"] == "zstd"
    assert r["key_order"]["checked"] == r["get"]["items"] == 1200
    assert r["key_order"]["concurrent"] == r["key_order"]["out_of_order"] == 0


def test_crash_with_key_order_keeps_order_across_kills():
    out = cli("crash", "--cycles", "4", "--seed", "3", "--keys", "5", "--key-order", "--compression", "zstd",
              "--json")  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    r = json.loads(out.stdout)
    assert r["ok"] and r["key_order"] and r["keys"] == 5 and r["compression"] == "zstd"
    assert r["gets"] > 0 and r["order_violations"] == r["key_concurrent"] == 0
    assert r["disk_bytes_at_end"] > 0


class CutByCtrlC:
    """A queue whose fifth put is cut short by Ctrl-C (the KeyboardInterrupt of the main thread,
    which runs fanout's producer)."""

    def __init__(self, q) -> None:
        self.q, self.calls = q, 0

    def put_many(self, items, **kw):
        self.calls += 1
        if self.calls == 5:
            raise KeyboardInterrupt
        return self.q.put_many(items, **kw)


def test_ctrl_c_in_a_producer_keeps_what_it_put_for_the_check(tmp_path):
    # before: the interrupted producer recorded nothing, so every delivery was "never put"
    # (an interrupted fanout said FAILED with one such error per reader)
    args = argparse.Namespace(**{**vars(flood_args(tmp_path)), "batch": 10, "keys": 3})
    run = Run(args)
    with run.open() as q:
        reader = q.reader("qtest")
        with pytest.raises(KeyboardInterrupt):
            run.produce(CutByCtrlC(q), 0, 1000)
        assert run.drain(reader) == 40
    assert run.ledger.produced == {0: 50} and run.ledger.unknown == {0: set(range(40, 50))}
    assert run.ledger.validate(ordered_logs=True, complete=False) == []
