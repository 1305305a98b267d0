"""``journaled dead-letters`` and ``journaled redrive`` (issue 24, point 4): a dead-letter queue
listed without owning it (filters, JSON, payloads shown safely), and its dead letters put back
into a queue as new items exactly once, also when the redrive is killed with SIGKILL midway
and run again; what is not selected stays in the dead-letter queue."""

from __future__ import annotations

import base64
import collections
import json
import os
import random
import subprocess
import sys
import time

import pytest

from journaled import DeadLetter, JournaledQueue, QueueConfig, ReaderConfig
from journaled.cli.deadletters import PAUSE_ENV, REDRIVE_READER, redrive_key
from journaled.cli.main import main
from journaled.disk.spoolfiles import pending_batches
from journaled.offline.scan import JournalScanner
from support.child import Child
from support.paths import ROOT

ENV = dict(os.environ, PYTHONPATH=ROOT)
TIMEOUT = 120


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "journaled", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env or ENV,
    )


def letter(
    n: int, reason: str, kind: str = "rejected", reader: str = "work", data: bytes | None = None
) -> bytes:
    payload = data if data is not None else b"payload-%d" % n
    return DeadLetter(n, payload, 1_700_000_000.0 + n, None, n % 4, kind, reason, reader).encode()


def make_queue(path: str, name: str, items: list[bytes] = ()) -> str:  # type: ignore[assignment]
    with JournaledQueue(path, QueueConfig(sync="always"), name=name) as q:
        for data in items:
            q.put(data)
    return path


def target_payloads(path: str) -> list[bytes]:
    """Every payload in the target queue's files, in id order."""
    return [bytes(rec.payload) for rec in JournalScanner(path, "target").records()]


def listed(path: str, *args: str) -> list[dict]:
    out = cli("dead-letters", path, "--json", *args)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


@pytest.fixture
def dead(tmp_path):
    """Twelve dead letters: reasons "timeout 0".."timeout 7" and "bad json 8".."bad json 11"."""
    items = [letter(n, f"timeout {n}", "max_errors" if n % 2 else "rejected") for n in range(8)]
    items += [letter(n, f"bad json {n}", reader="audit") for n in range(8, 12)]
    return make_queue(str(tmp_path / "dead"), "dead", items)


@pytest.fixture
def target(tmp_path):
    return make_queue(str(tmp_path / "target"), "target")


# ------------------------------------------------------------------------------ listing
def test_listing_says_why_where_from_and_when_for_dead_letters_a_reader_made(tmp_path, capsys):
    dead = JournaledQueue(str(tmp_path / "dead"), QueueConfig(sync="always"), name="dead")
    with JournaledQueue(str(tmp_path / "src"), name="src") as src:
        r = src.reader("work", ReaderConfig(dead_letter=dead, max_errors=2))
        src.put(b"poison")
        src.put(b"malformed")
        for _ in range(2):
            r.abort(r.get(block=False), delay=0)
        r.reject(r.get(block=False), "cannot parse")
        src.run_policies()
    dead.close()
    assert main(["dead-letters", str(tmp_path / "dead")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[-1] == "2 dead letters"
    assert "max_errors" in lines[0] and "reader=work" in lines[0] and "id=1" in lines[0]
    assert "errors=2" in lines[0]
    assert "rejected" in lines[1] and "id=2" in lines[1] and 'reason="cannot parse"' in lines[1]
    assert "errors=0" in lines[1]


def test_listing_filters_by_reason_kind_reader_and_limit(dead):
    rows = listed(dead)
    assert [r["dead_id"] for r in rows] == list(range(1, 13))
    assert rows[3] == {
        "dead_id": 4,
        "dead_lettered_at": rows[3]["dead_lettered_at"],
        "redriven": False,
        "envelope": True,
        "kind": "max_errors",
        "reason": "timeout 3",
        "reader": "work",
        "id": 3,
        "error_count": 3,
        "add_time": 1_700_000_003.0,
        "expire_at": None,
        "size": len(b"payload-3"),
        "key": None,
        "headers": {},
    }
    assert [r["id"] for r in listed(dead, "--reason", "timeout")] == list(range(8))
    assert [r["id"] for r in listed(dead, "--reason", "json 1")] == [10, 11]
    assert [r["id"] for r in listed(dead, "--reason", "Timeout")] == []  # case-sensitive
    assert [r["id"] for r in listed(dead, "--kind", "max_errors")] == [1, 3, 5, 7]
    assert [r["id"] for r in listed(dead, "--reader", "audit")] == [8, 9, 10, 11]
    assert [r["id"] for r in listed(dead, "--reason", "timeout", "--kind", "rejected", "--limit", "2")] == [
        0,
        2,
    ]


def test_payloads_are_shown_escaped_hex_or_base64_never_raw(tmp_path):
    nasty = b"\x1b[2J\x1b]0;owned\x07\r\nline2\xff"
    path = make_queue(str(tmp_path / "dead"), "dead", [letter(1, "bad\x1b[31m", data=nasty)])
    text = cli("dead-letters", path, "--payload")
    assert text.returncode == 0
    assert "\x1b" not in text.stdout and "\x07" not in text.stdout and "\r" not in text.stdout
    assert "payload: \\x1b[2J\\x1b]0;owned\\x07\\r\\nline2\\xff" in text.stdout
    assert 'reason="bad\\u001b[31m"' in text.stdout
    assert f"payload: {nasty.hex()}" in cli("dead-letters", path, "--payload-format", "hex").stdout
    (row,) = listed(path, "--payload")
    assert base64.b64decode(row["payload"]) == nasty


def test_an_item_that_is_not_an_envelope_is_listed_as_such_and_never_matches_a_filter(tmp_path):
    path = make_queue(str(tmp_path / "dead"), "dead", [b"raw bytes", letter(1, "x")])
    rows = listed(path)
    assert rows[0]["envelope"] is False and "bad magic" in rows[0]["error"] and rows[0]["size"] == 9
    assert [r["dead_id"] for r in listed(path, "--reason", "")] == [2]


def tree(path: str) -> dict[str, tuple[int, int]]:
    return {
        os.path.relpath(os.path.join(root, n), path): (
            os.lstat(os.path.join(root, n)).st_mtime_ns,
            os.lstat(os.path.join(root, n)).st_size,
        )
        for root, dirs, files in os.walk(path)
        for n in [*dirs, *files]
    }


def test_listing_writes_nothing_and_never_becomes_the_owner(dead):
    before = tree(dead)
    assert len(listed(dead)) == 12
    assert tree(dead) == before
    with JournaledQueue(dead, name="dead") as q:
        assert q.is_owner  # the listing left no process holding the directory


def test_listing_beside_a_live_owner_says_it_reads_the_files(dead, capsys):
    with JournaledQueue(dead, name="dead") as q:
        q.put(letter(99, "late"))
        assert main(["dead-letters", dead, "--reason", "timeout 1"]) == 0
    out = capsys.readouterr()
    assert out.err.startswith(f"journaled dead-letters: note: pid {os.getpid()} owns {dead}")
    assert out.out.splitlines()[-1] == "1 dead letter"


# ------------------------------------------------------------------------------ errors
def assert_one_line_exit_2(out: subprocess.CompletedProcess[str], command: str, *words: str) -> None:
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith(f"journaled {command}: ") and out.stderr.count("\n") == 1, out.stderr
    assert out.stdout == ""
    for w in words:
        assert w in out.stderr


@pytest.mark.parametrize("command", ["dead-letters", "redrive"])
def test_a_path_that_is_not_a_queue_is_one_line_exit_2_and_creates_nothing(tmp_path, target, command):
    extra = ["--to", target] if command == "redrive" else []
    missing = str(tmp_path / "missing")
    assert_one_line_exit_2(cli(command, missing, *extra), command, "missing", "does not exist")
    assert not os.path.exists(missing)
    (tmp_path / "file").write_bytes(b"x")
    assert_one_line_exit_2(cli(command, str(tmp_path / "file"), *extra), command, "not a directory")
    os.mkdir(tmp_path / "empty")
    assert_one_line_exit_2(cli(command, str(tmp_path / "empty"), *extra), command, "no journaled queue")
    assert os.listdir(tmp_path / "empty") == []


def test_a_redrive_to_a_path_that_is_not_a_queue_is_one_line_exit_2_and_moves_nothing(tmp_path, dead):
    before = tree(dead)
    assert_one_line_exit_2(cli("redrive", dead, "--to", str(tmp_path / "nowhere")), "redrive", "nowhere")
    assert not os.path.exists(tmp_path / "nowhere")
    assert_one_line_exit_2(cli("redrive", dead, "--to", dead), "redrive", "dead-letter queue's own directory")
    assert_one_line_exit_2(cli("redrive", dead, "--to", dead, "--limit", "0"), "redrive", "--limit")
    assert tree(dead) == before


# ------------------------------------------------------------------------------ redrive
def test_redrive_moves_exactly_the_selected_dead_letters_as_new_items(dead, target, capsys):
    assert main(["redrive", dead, "--to", target, "--reason", "timeout", "--limit", "5"]) == 0
    assert capsys.readouterr().out.startswith(f"redrove 5 dead letter(s) from {dead} to {target}")
    assert target_payloads(target) == [b"payload-%d" % n for n in range(5)]
    assert [r["id"] for r in listed(dead)] == [5, 6, 7, 8, 9, 10, 11]  # the rest stayed
    assert main(["redrive", dead, "--to", target, "--kind", "rejected", "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts["redriven"] == 5 and counts["not_selected"] == 2  # 6 and 8..11; 5 and 7 stay
    assert [r["id"] for r in listed(dead)] == [5, 7]
    assert main(["redrive", dead, "--to", target]) == 0
    assert listed(dead) == []
    got = target_payloads(target)
    assert sorted(got) == sorted(b"payload-%d" % n for n in range(12)) and len(got) == 12
    with JournaledQueue(target, name="target") as q:
        r = q.reader("fresh")
        first = r.get(block=False)
        assert first.id == 1 and first.add_time > 1_700_000_100  # a new put: new id, new add time
        assert first.expire_at is None
    # the dead letters stay on disk, marked redriven, until retention or archiving takes them
    assert all(r["redriven"] for r in listed(dead, "--all"))


def test_dead_letters_not_selected_keep_their_error_count_and_order(dead, target):
    assert main(["redrive", dead, "--to", target, "--reader", "audit"]) == 0
    with JournaledQueue(dead, name="dead") as q:
        redrive = q.reader(REDRIVE_READER)
        stats = redrive.stats()
        assert stats.backlog_items == 8 and stats.open_reads == 0
        assert [redrive.get(block=False).error_count for _ in range(8)] == [0] * 8
    assert [r["id"] for r in listed(dead)] == list(range(8))


def test_a_redrive_run_as_a_client_leaves_the_dead_letters_it_did_not_select_untouched(dead, target):
    """Another process owns both queues: the redrive is its client.  The dead letters it read and
    did not select are given back (released), not aborted: no error counted, order kept."""
    owner = Child(OWNER, dead, target)
    try:
        owner.wait_for_line("ready")
        out = cli("redrive", dead, "--to", target, "--reader", "audit")
        assert out.returncode == 0, out.stderr
        owner.send("quit")
        owner.wait_for_line("closed")
    finally:
        if owner.proc.poll() is None:
            owner.kill()
    with JournaledQueue(dead, name="dead") as q:
        redrive = q.reader(REDRIVE_READER)
        assert redrive.stats().backlog_items == 8
        assert [redrive.get(block=False).error_count for _ in range(8)] == [0] * 8
    assert [r["id"] for r in listed(dead)] == list(range(8))


ORDER_OWNER = """
import sys
from journaled import JournaledQueue
from journaled.cli.deadletters import REDRIVE_READER
dead = JournaledQueue(sys.argv[1], name="dead")
target = JournaledQueue(sys.argv[2], name="target")
print("ready", flush=True)
sys.stdin.readline()
live = dead.reader(REDRIVE_READER)
print("order", [live.get(block=False).id for _ in range(8)], flush=True)
dead.close()
target.close()
"""


def test_dead_letters_a_client_redrive_did_not_select_keep_their_order_in_the_live_owner(dead, target):
    # the owner's reader sees the give-backs live (a reopen would hide any reordering: it reads
    # the journal in id order)
    owner = Child(ORDER_OWNER, dead, target)
    try:
        owner.wait_for_line("ready")
        out = cli("redrive", dead, "--to", target, "--reader", "audit")
        assert out.returncode == 0, out.stderr
        owner.send("order")
        owner.wait_for_line("order")
    finally:
        owner.finish()
    (line,) = [line for line in owner.lines if line.startswith("order")]
    assert line == "order " + str(list(range(1, 9)))


def test_a_redrive_that_cannot_write_into_the_target_is_one_line_exit_2_and_consumes_nothing(dead, target):
    with open(os.path.join(target, "spool"), "wb") as f:  # a file where the spool folder goes:
        f.write(b"not a folder")  # no batch can be written
    owner = Child(OWNER, dead, target)
    try:
        owner.wait_for_line("ready")
        out = cli("redrive", dead, "--to", target, "--reason", "json")
        assert_one_line_exit_2(out, "redrive", "spool")
        owner.send("quit")
        owner.wait_for_line("closed")
    finally:
        if owner.proc.poll() is None:
            owner.kill()
    assert len(listed(dead)) == 12
    with JournaledQueue(dead, name="dead") as q:  # the client's reads were given back, not aborted
        redrive = q.reader(REDRIVE_READER)
        assert [redrive.get(block=False).error_count for _ in range(12)] == [0] * 12


def test_the_redrive_key_is_the_same_for_the_same_dead_letter_only():
    k = redrive_key("dead", 7, 1000, b"env")
    assert k == redrive_key("dead", 7, 1000, b"env")
    others = {redrive_key("dead", 8, 1000, b"env"), redrive_key("dead", 7, 1001, b"env")}
    others |= {redrive_key("dead2", 7, 1000, b"env"), redrive_key("dead", 7, 1000, b"env2")}
    assert k not in others and len(others) == 4


# ------------------------------------------------------------------------------ kill -9
def redrive_child(dead: str, target: str, *args: str, pause: int | None = None) -> subprocess.Popen[str]:
    env = dict(ENV)
    if pause is not None:
        env[PAUSE_ENV] = str(pause)
    return subprocess.Popen(
        [sys.executable, "-m", "journaled", "redrive", dead, "--to", target, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def kill_when_paused(proc: subprocess.Popen[str]) -> None:
    assert proc.stderr is not None
    line = proc.stderr.readline()  # the hook's line, written just before it stops
    assert "paused after" in line, (line + proc.stderr.read(), proc.stdout.read() if proc.stdout else "")
    proc.kill()
    proc.wait(timeout=TIMEOUT)


def check_exactly_once(dead: str, target: str, selected: list[bytes], left: list[int]) -> None:
    got = collections.Counter(target_payloads(target))
    assert {p: n for p, n in got.items() if n > 1} == {}, "duplicated"
    assert [p for p in selected if p not in got] == [], "lost"
    assert set(got) == set(selected)
    assert [r["id"] for r in listed(dead)] == left


def many(tmp_path, n: int) -> tuple[str, list[bytes]]:
    items = [letter(i, "timeout" if i % 3 else "kept") for i in range(n)]
    return make_queue(str(tmp_path / "dead"), "dead", items), [b"payload-%d" % i for i in range(n) if i % 3]


def test_a_redrive_killed_after_a_put_and_run_again_puts_each_dead_letter_exactly_once(tmp_path, target):
    dead, selected = many(tmp_path, 30)
    for pause in (7, 3, 11):  # the third run starts where the first two died
        kill_when_paused(redrive_child(dead, target, "--reason", "timeout", pause=pause))
    out = cli("redrive", dead, "--to", target, "--reason", "timeout")
    assert out.returncode == 0, out.stderr
    assert "were in the target already" in out.stdout
    check_exactly_once(dead, target, selected, [i for i in range(30) if i % 3 == 0])
    assert pending_batches(target) == []


OWNER = """
import sys
from journaled import JournaledQueue
dead = JournaledQueue(sys.argv[1], name="dead")
target = JournaledQueue(sys.argv[2], name="target")
print("ready", flush=True)
sys.stdin.readline()
dead.close()
target.close()
print("closed", flush=True)
"""


def test_a_redrive_killed_while_another_process_owns_both_queues_loses_and_duplicates_nothing(
    tmp_path, target
):
    dead, selected = many(tmp_path, 24)
    owner = Child(OWNER, dead, target)
    try:
        owner.wait_for_line("ready")
        for pause in (5, 2, 6, 3):  # the owner aborts what each killed client held
            kill_when_paused(redrive_child(dead, target, "--reason", "timeout", pause=pause))
        out = cli("redrive", dead, "--to", target, "--reason", "timeout")
        assert out.returncode == 0, out.stderr
        assert f"its owner, pid {owner.proc.pid}" in out.stdout
        deadline = time.monotonic() + TIMEOUT
        while pending_batches(target) and time.monotonic() < deadline:
            time.sleep(0.05)  # the owner's background thread adopts the spool
        owner.send("quit")
        owner.wait_for_line("closed")
    finally:
        if owner.proc.poll() is None:
            owner.kill()
    check_exactly_once(dead, target, selected, [i for i in range(24) if i % 3 == 0])


def test_redrives_killed_at_random_moments_then_run_again_lose_and_duplicate_nothing(tmp_path, target):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    dead, selected = many(tmp_path, 60)
    spool = os.path.join(target, "spool")
    for _ in range(4):
        before = os.stat(spool).st_mtime_ns if os.path.isdir(spool) else 0
        proc = redrive_child(dead, target, "--reason", "timeout")
        deadline = time.monotonic() + TIMEOUT
        # until the run has put something into the target (or ended), then a moment more
        while proc.poll() is None and (os.stat(spool).st_mtime_ns if os.path.isdir(spool) else 0) == before:
            assert time.monotonic() < deadline
            time.sleep(0.002)
        time.sleep(rng.uniform(0, 0.05))  # where in the run the kill lands does not matter
        proc.kill()
        proc.wait(timeout=TIMEOUT)
    out = cli("redrive", dead, "--to", target, "--reason", "timeout")
    assert out.returncode == 0, (seed, out.stderr)
    check_exactly_once(dead, target, selected, [i for i in range(60) if i % 3 == 0])


def test_a_redriven_item_keeps_its_headers_and_key_and_is_never_refused_as_a_duplicate(tmp_path):
    from journaled.format.metadata import Meta
    from journaled.item import put_headers

    meta = Meta(not_before_ms=1_700_000_000_000, key=b"job-1", headers=put_headers({"ct": b"json"}))
    sent = DeadLetter(1, b"body", 1_700_000_000.0, None, 5, "max_errors", "boom", "work", meta).encode()
    dead = make_queue(str(tmp_path / "dead"), "dead", [sent])
    target = str(tmp_path / "target")
    with JournaledQueue(target, QueueConfig(dedup_window=3600.0), name="target") as q:
        q.put(b"the original", key=b"job-1")  # the key is in the target's window already
    assert main(["redrive", dead, "--to", target]) == 0
    with JournaledQueue(target, QueueConfig(dedup_window=3600.0), name="target") as q:
        r = q.reader("fresh", ReaderConfig(start="earliest"))
        got = [r.get(timeout=5) for _ in range(2)]
    assert [g.data for g in got] == [b"the original", b"body"]
    assert (got[1].key, dict(got[1].headers), got[1].not_before) == (b"job-1", {"ct": b"json"}, None)


def test_listing_shows_a_dead_letters_key_and_headers_escaped_and_in_json(tmp_path, capsys):
    from journaled.format.metadata import Meta
    from journaled.item import put_headers

    meta = Meta(key=b"order-7\x1b", headers=put_headers({"ct": b"json", "bin": b"\x00"}))
    sent = DeadLetter(1, b"body", 1_700_000_000.0, None, 1, "rejected", "bad", "work", meta).encode()
    dead = make_queue(str(tmp_path / "dead"), "dead", [sent, letter(2, "plain")])
    assert main(["dead-letters", dead]) == 0
    out = capsys.readouterr().out
    assert "key=order-7\\x1b headers={ct: json, bin: \\x00}" in out and "\x1b" not in out
    assert out.count("key=") == 1  # the plain dead letter shows none
    rows = listed(dead)
    assert base64.b64decode(rows[0]["key"]) == b"order-7\x1b"
    assert {k: base64.b64decode(v) for k, v in rows[0]["headers"].items()} == {"ct": b"json", "bin": b"\x00"}
    assert rows[1]["key"] is None and rows[1]["headers"] == {}
