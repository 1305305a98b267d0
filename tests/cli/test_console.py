"""``journaled put`` and ``journaled get``: a queue from the shell, as owner or as a client."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from journaled import Empty, JournaledQueue, ReaderConfig
from tests.support.child import Child


def cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "journaled", *args], input=stdin, capture_output=True, timeout=120
    )


def with_reader(path: str, name: str = "r") -> None:
    with JournaledQueue(path) as q:
        q.reader(name, ReaderConfig(start="earliest"))


def test_put_takes_arguments_lines_of_stdin_or_a_file_with_key_headers_and_delay(tmp_path):
    path = str(tmp_path / "q")
    out = cli("put", path, "--create", "one", "two", "--key", "k", "--header", "trace=abc")
    assert (out.returncode, out.stdout.split()) == (0, [b"1", b"2"]), out.stderr
    assert cli("put", path, stdin=b"three\nfour\n").stdout.split() == [b"3", b"4"]
    blob = tmp_path / "blob"
    blob.write_bytes(b"\x00binary\nwhole\xff")
    assert cli("put", path, "--file", str(blob), "--delay", "3600").stdout.split() == [b"5"]
    with JournaledQueue(path) as q:
        r = q.reader("r", ReaderConfig(start="earliest"))
        items = [r.get(block=False) for _ in range(4)]
        assert [i.data for i in items] == [b"one", b"two", b"three", b"four"]
        assert (items[0].key, dict(items[0].headers)) == (b"k", {"trace": b"abc"})
        with pytest.raises(Empty):
            r.get(block=False)  # the file's item is not due for an hour
        assert r.stats().items_not_due == 1


def test_get_shows_without_taking_unless_commit(tmp_path):
    path = str(tmp_path / "q")
    assert cli("put", path, "--create", "a", "b", "c").returncode == 0
    with_reader(path)
    peek = cli("get", path, "--reader", "r", "--count", "2")
    assert (peek.returncode, peek.stdout.decode().splitlines()) == (0, ["1 a", "2 b"])
    again = cli("get", path, "--reader", "r", "--count", "5", "--json")
    rows = [json.loads(line) for line in again.stdout.splitlines()]
    assert [(r["id"], base64.b64decode(r["payload"]), r["error_count"]) for r in rows] == [
        (1, b"a", 0),
        (2, b"b", 0),
        (3, b"c", 0),
    ]  # given back as they were: no error counted
    taken = cli("get", path, "--reader", "r", "--count", "2", "--commit")
    assert taken.stdout.decode().splitlines() == ["1 a", "2 b"]
    assert cli("get", path, "--reader", "r", "--count", "5").stdout.decode().splitlines() == ["3 c"]


def test_a_payload_never_reaches_the_terminal_raw(tmp_path):
    path = str(tmp_path / "q")
    cli("put", path, "--create", "--file", "-", stdin=b"\x1b]0;owned\x07")
    with_reader(path)
    out = cli("get", path, "--reader", "r").stdout
    assert b"\x1b" not in out and b"\\x1b" in out


def test_wrong_paths_readers_and_options_are_one_line_exit_2_and_create_nothing(tmp_path):
    missing = str(tmp_path / "missing")
    for args in (
        ("put", missing, "x"),
        ("get", missing, "--reader", "r"),
        ("put", str(tmp_path), "x"),  # a directory holding no queue
        ("get", str(tmp_path), "--reader", "r"),
    ):
        out = cli(*args)
        assert out.returncode == 2 and len(out.stderr.decode().splitlines()) == 1, (args, out.stderr)
    assert os.listdir(tmp_path) == []
    path = str(tmp_path / "q")
    cli("put", path, "--create", "x")
    unknown = cli("get", path, "--reader", "nobody")
    assert unknown.returncode == 2 and b"no reader 'nobody'" in unknown.stderr
    with JournaledQueue(path) as q:
        assert q.readers() == []  # a get never creates a reader
    assert cli("put", path, "--header", "novalue", "x").returncode == 2
    assert cli("get", path, "--reader", "r", "--count", "0").returncode == 2


OWNER = """
import sys
from journaled import JournaledQueue, ReaderConfig
q = JournaledQueue(sys.argv[1])
q.reader("r", ReaderConfig(start="earliest"))
print("ready", flush=True)
sys.stdin.readline()
print("stats", q.reader("r").stats().items_waiting, q.reader("r").stats().open_reads, flush=True)
q.close()
"""


def test_put_and_get_work_as_clients_of_a_running_owner(tmp_path):
    path = str(tmp_path / "q")
    JournaledQueue(path).close()
    owner = Child(OWNER, path)
    try:
        owner.wait_for_line("ready")
        assert cli("put", path, "from", "the", "shell").stdout.split() == [b"1", b"2", b"3"]
        assert cli("get", path, "--reader", "r", "--count", "1", "--commit").stdout.split() == [b"1", b"from"]
        owner.send("stats")
        owner.wait_for_line("stats")
        assert "stats 2 0" in owner.lines  # two waiting, nothing left open by the CLI
    finally:
        owner.finish()


PEEKED_OWNER = """
import sys
from journaled import JournaledQueue, ReaderConfig
q = JournaledQueue(sys.argv[1])
r = q.reader("r", ReaderConfig(start="earliest"))
q.put_many([b"m1", b"m2", b"m3", b"m4", b"m5"])
print("ready", flush=True)
sys.stdin.readline()
print("order", " ".join(r.get(timeout=10).data.decode() for _ in range(5)), flush=True)
q.close()
"""


def test_a_look_beside_a_running_owner_leaves_the_readers_order_as_it_was(tmp_path):
    # the CLI is a client here: its reads go back into the owner's live reader, where reads
    # given back stack up at the head, so it must give them back newest first
    path = str(tmp_path / "q")
    JournaledQueue(path).close()
    owner = Child(PEEKED_OWNER, path)
    try:
        owner.wait_for_line("ready")
        peek = cli("get", path, "--reader", "r", "--count", "3")
        assert peek.stdout.decode().splitlines() == ["1 m1", "2 m2", "3 m3"], peek.stderr
        owner.send("order")
        owner.wait_for_line("order")
        assert "order m1 m2 m3 m4 m5" in owner.lines
    finally:
        owner.finish()


def test_follow_prints_items_as_they_come_and_ctrl_c_gives_the_open_read_back(tmp_path):
    path = str(tmp_path / "q")
    cli("put", path, "--create", "first")
    with_reader(path)
    follow = subprocess.Popen(
        [sys.executable, "-m", "journaled", "get", path, "--reader", "r", "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert follow.stdout is not None
    assert follow.stdout.readline() == b"1 first\n"
    time.sleep(0.5)  # waiting for the next item now
    follow.send_signal(signal.SIGINT)
    _, err = follow.communicate(timeout=60)
    assert follow.returncode == 130 and b"interrupted" in err and b"Traceback" not in err
    with JournaledQueue(path) as q:
        item = q.reader("r").get(block=False)
        assert (item.id, item.error_count) == (1, 0)  # given back, uncounted
