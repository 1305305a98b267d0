"""The inspect/check/repair command line: `journaled stat|check|repair|dump`."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import subprocess
import sys

import pytest

from journaled import Empty, JournaledQueue, QueueConfig
from journaled.cli.main import main
from journaled.format.record import PUT_OVERHEAD


def payload(i: int) -> bytes:
    return b"p%03d" % i + b"." * 30


@pytest.fixture
def qpath(tmp_path):
    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(sync="always", journal_size=4096), name="q") as q:
        a = q.reader("a")
        q.reader("b")
        for i in range(1, 11):
            q.put(payload(i))
        for _ in range(4):
            a.commit(a.get(block=False))
    return path


def tree_digest(path: str) -> str:
    h = hashlib.sha256()
    for root, _dirs, files in sorted(os.walk(path)):
        for f in sorted(files):
            p = os.path.join(root, f)
            if f == ".journaled.sock":
                continue  # the live owner's socket (remote/server.py): no bytes
            h.update(p.encode())
            with open(p, "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()


def journal_file(path: str) -> str:
    (f,) = [p for p in glob.glob(os.path.join(path, "q.[0-9]*")) if p.rsplit(".", 1)[-1].isdigit()]
    return f


def damage_record(path: str, k: int) -> None:
    f = journal_file(path)
    size = os.path.getsize(f)
    rec = PUT_OVERHEAD + len(payload(0))
    start = size - (10 - k + 1) * rec  # record of id k
    with open(f, "r+b") as fh:
        fh.seek(start + 12)
        b = fh.read(1)
        fh.seek(start + 12)
        fh.write(bytes([b[0] ^ 0x40]))


def test_stat_json_shows_readers_heads_backlog_files_bytes(qpath, capsys):
    assert main(["stat", qpath, "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["queue"] == "q" and st["files"] == 1 and st["bytes"] > 0
    assert (st["first_id"], st["next_id"], st["items"]) == (1, 11, 10)
    readers = {r["name"]: r for r in st["readers"]}
    assert readers["a"]["head"] == 5 and readers["a"]["backlog_items"] == 6
    assert readers["b"]["head"] == 1 and readers["b"]["backlog_items"] == 10
    assert st["owner_pid"] is None
    assert st["oldest_item_age_s"] is not None


def test_stat_json_and_reader_stats_use_the_same_word_for_the_waiting_items(qpath, capsys):
    assert main(["stat", qpath, "--json"]) == 0
    [cli_reader] = [r for r in json.loads(capsys.readouterr().out)["readers"] if r["name"] == "a"]
    with JournaledQueue(qpath, name="q") as q:
        [lib_reader] = [r for r in q.stats().readers if r.name == "a"]
    assert "backlog" not in cli_reader
    assert cli_reader["backlog_items"] == lib_reader.backlog_items == 6


def test_stat_text_names_the_live_owner(qpath, capsys):
    with JournaledQueue(qpath, name="q"):
        assert main(["stat", qpath]) == 0
    out = capsys.readouterr().out
    assert f"open by pid {os.getpid()}" in out
    assert "reader a: head 5, backlog_items 6" in out


def test_check_is_clean_and_read_only(qpath, capsys):
    before = tree_digest(qpath)
    assert main(["check", qpath]) == 0
    assert "clean" in capsys.readouterr().out
    assert tree_digest(qpath) == before


def test_check_reports_damage_with_non_zero_exit_and_modifies_nothing(qpath, capsys):
    damage_record(qpath, 6)
    with open(os.path.join(qpath, "q.read.b"), "r+b") as f:
        f.write(b"junk")
    before = tree_digest(qpath)
    assert main(["check", qpath, "--json"]) == 1
    rep = json.loads(capsys.readouterr().out)
    kinds = sorted(f["kind"] for f in rep["findings"])
    assert kinds == ["bad-checkpoint", "damage"]
    (dmg,) = [f for f in rep["findings"] if f["kind"] == "damage"]
    assert dmg["ids_lost"] == [6, 6]
    assert tree_digest(qpath) == before


def test_repair_salvage_keeps_originals_and_yields_a_clean_queue(qpath, capsys):
    damage_record(qpath, 6)
    original = open(journal_file(qpath), "rb").read()
    assert main(["repair", qpath, "--mode", "salvage"]) == 0
    out = capsys.readouterr().out
    assert "kept 9 of 9 valid records" in out
    (backup,) = glob.glob(os.path.join(qpath, "repair-*"))
    assert open(os.path.join(backup, os.path.basename(journal_file(qpath))), "rb").read() == original
    assert main(["check", qpath]) == 0
    with JournaledQueue(qpath, QueueConfig(recovery="strict"), name="q") as q:
        r = q.reader("b")
        got = []
        while True:
            try:
                it = r.get(block=False)
            except Empty:
                break
            assert it.data == payload(it.id)
            got.append(it.id)
            r.commit(it)
        assert got == [1, 2, 3, 4, 5, 7, 8, 9, 10]
        assert q.put(b"new") == 11


def test_repair_refuses_a_directory_held_by_a_live_process(qpath, capsys):
    damage_record(qpath, 3)
    code = (
        "import sys, time\n"
        "from journaled import JournaledQueue, QueueConfig\n"
        f"q = JournaledQueue({qpath!r}, QueueConfig(recovery='salvage'), name='q')\n"
        "print('ready', flush=True)\n"
        "sys.stdin.read()\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        before = tree_digest(qpath)
        assert main(["repair", qpath]) == 3
        assert "refusing to repair" in capsys.readouterr().err
        assert tree_digest(qpath) == before
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)


def test_dump_reader_view_skips_what_it_committed(qpath, capsys):
    assert main(["dump", qpath, "--reader", "a", "--json"]) == 0
    ids = [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()]
    assert ids == list(range(5, 11))


def test_repair_with_nothing_to_do(qpath, capsys):
    assert main(["repair", qpath]) == 0
    assert "nothing to repair" in capsys.readouterr().out
    assert not glob.glob(os.path.join(qpath, "repair-*"))


def test_check_is_clean_after_point_in_time_recovery_but_notes_the_id_gap(qpath, capsys):
    damage_record(qpath, 6)
    with JournaledQueue(
        qpath, QueueConfig(recovery="point_in_time"), name="q"
    ) as q:  # cuts 6..10, kept aside
        assert q.recovery_report[0].ids_lost == (6, 10)
        assert q.put(b"new") == 11
    capsys.readouterr()
    assert main(["check", qpath, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert [f["kind"] for f in rep["findings"]] == ["id-gap"]
    assert main(["stat", qpath, "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert len(st["damaged_files_kept"]) == 1


def test_a_wrong_path_is_a_one_line_error_not_a_traceback(tmp_path, capsys):
    missing = str(tmp_path / "no-such-queue")
    for command in ("stat", "check", "dump"):
        assert main([command, missing]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"journaled {command}: ") and "Traceback" not in err
        assert err.count("\n") == 1 and "no-such-queue" in err
