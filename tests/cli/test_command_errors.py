"""`journaled stat|dump|check|repair` through a real process: a wrong path is one clear line and
exit 2, never a traceback, never an invented queue and never a file created; dump shows payloads
safely; check says what an open would drop and how to repair it."""

from __future__ import annotations

import base64
import glob
import json
import os
import subprocess
import sys

import pytest

from journaled import Empty, JournaledQueue, QueueConfig
from journaled.format.record import PUT_OVERHEAD
from support.paths import ROOT

COMMANDS = ("stat", "dump", "check", "repair")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run(
        [sys.executable, "-m", "journaled", *args], capture_output=True, text=True, timeout=120, env=env
    )


def listing(path: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(r, f), path) for r, ds, fs in os.walk(path) for f in fs + ds)


def assert_one_line_usage_error(out: subprocess.CompletedProcess[str], command: str, *words: str) -> None:
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith(f"journaled {command}: ")
    assert out.stderr.count("\n") == 1, out.stderr
    assert out.stdout == ""
    for w in words:
        assert w in out.stderr, out.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_a_missing_path_is_one_line_exit_2_and_creates_nothing(tmp_path, command):
    missing = tmp_path / "no-such-queue"
    assert_one_line_usage_error(cli(command, str(missing)), command, "no-such-queue", "does not exist")
    assert not missing.exists()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_a_regular_file_is_one_line_exit_2_and_is_left_alone(tmp_path, command):
    f = tmp_path / "notes.txt"
    f.write_bytes(b"not a queue\n")
    assert_one_line_usage_error(cli(command, str(f)), command, "notes.txt", "not a directory")
    assert f.read_bytes() == b"not a queue\n"
    assert os.listdir(tmp_path) == ["notes.txt"]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_directory_that_is_not_a_queue_is_refused_and_no_lock_file_is_created(tmp_path, command):
    d = tmp_path / "logs"
    d.mkdir()
    (d / "app.1").write_bytes(b"rotated log line\n")  # named like a journal file, but is not one
    (d / "README").write_text("hello\n")
    before = listing(str(d))
    assert_one_line_usage_error(cli(command, str(d)), command, "no journaled queue")
    assert listing(str(d)) == before  # above all: no .journaled.lock, no repair-*/ directory


@pytest.fixture
def two_queues(tmp_path):
    d = str(tmp_path / "shared")
    for name, n in (("alpha", 2), ("beta", 3)):
        with JournaledQueue(d, QueueConfig(sync="always"), name=name) as q:
            for i in range(n):
                q.put(b"%s-%d" % (name.encode(), i))
    return d


@pytest.mark.parametrize("command", COMMANDS)
def test_a_directory_of_several_queues_needs_name(two_queues, command):
    before = listing(two_queues)
    assert_one_line_usage_error(cli(command, two_queues), command, "alpha", "beta", "--name")
    assert listing(two_queues) == before


def test_name_selects_one_of_several_queues(two_queues):
    out = cli("stat", two_queues, "--name", "beta", "--json")
    assert out.returncode == 0, out.stderr
    st = json.loads(out.stdout)
    assert (st["queue"], st["items"]) == ("beta", 3)
    out = cli("dump", two_queues, "--name", "alpha", "--json")
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 2
    assert cli("check", two_queues, "--name", "alpha").returncode == 0


@pytest.mark.parametrize("command", COMMANDS)
def test_a_name_the_directory_does_not_hold_is_refused(two_queues, command):
    before = listing(two_queues)
    assert_one_line_usage_error(cli(command, two_queues, "--name", "gamma"), command, "gamma", "alpha")
    assert listing(two_queues) == before


@pytest.fixture
def hostile(tmp_path):
    d = str(tmp_path / "q")
    with JournaledQueue(d, QueueConfig(sync="always"), name="q") as q:
        q.put(b"\x1b[2J\x1b]0;owned\x07clear\rscreen\n")
        q.put(bytes(range(256)))
    return d


def test_dump_escapes_control_bytes(hostile):
    out = cli("dump", hostile)
    assert out.returncode == 0, out.stderr
    assert not any(ord(c) < 32 and c != "\n" or ord(c) == 127 for c in out.stdout)
    assert "\\x1b[2J" in out.stdout
    assert len(out.stdout.splitlines()) == 2


def test_dump_with_a_range_that_cannot_match_is_a_usage_error_not_silence(hostile):
    assert_one_line_usage_error(cli("dump", hostile, "--start", "5", "--end", "3"), "dump", "--end 3")
    late, early = "2030-01-01T00:00:00Z", "2020-01-01T00:00:00Z"
    assert_one_line_usage_error(cli("dump", hostile, "--since", late, "--until", early), "dump", "--until")
    assert cli("dump", hostile, "--start", "2", "--end", "2").stdout.count("\n") == 1  # one id: fine


def test_dump_payload_as_text_hex_and_base64(hostile):
    text = cli("dump", hostile, "--payload", "--limit", "1").stdout
    assert "\\x1b[2J\\x1b]0;owned\\x07clear\\rscreen\\n" in text
    assert "\x1b" not in text
    hexed = cli("dump", hostile, "--payload", "hex", "--start", "2").stdout
    assert bytes(range(256)).hex() in hexed
    b64 = cli("dump", hostile, "--payload", "base64", "--start", "2").stdout
    assert base64.b64encode(bytes(range(256))).decode() in b64


def test_dump_json_carries_payloads_as_base64(hostile):
    out = cli("dump", hostile, "--json", "--payload")
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert base64.b64decode(rows[1]["payload"]) == bytes(range(256))
    assert base64.b64decode(rows[0]["payload"]).startswith(b"\x1b[2J")


def _put_and_damage(path: str) -> None:
    # two files: the damage sits in the middle of the older one
    with JournaledQueue(path, QueueConfig(sync="always", journal_size=1024), name="q") as q:
        q.reader("r")
        for i in range(1, 41):
            q.put(b"item-%03d" % i + b"." * 40)
    files = sorted(p for p in glob.glob(os.path.join(path, "q.[0-9]*")) if p.rsplit(".", 1)[-1].isdigit())
    assert len(files) > 2
    size = PUT_OVERHEAD + 48
    with open(files[0], "r+b") as f:  # flip a byte in the body of the fourth-last record
        f.seek(-4 * size + 20, os.SEEK_END)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0x55]))


def test_check_says_exactly_which_ids_a_default_open_drops_and_suggests_repair(tmp_path):
    path = str(tmp_path / "q")
    _put_and_damage(path)
    out = cli("check", path, "--json")
    assert out.returncode == 1
    report = json.loads(out.stdout)
    (finding,) = report["findings"]
    lo, hi = finding["ids_lost"]
    text = cli("check", path)
    assert text.returncode == 1
    assert f"ids {lo}..{hi} lost" in text.stdout
    assert f"journaled repair {path}" in text.stdout
    with JournaledQueue(path, QueueConfig(sync="always"), name="q") as q:
        r = q.reader("r")
        got = []
        while True:
            try:
                it = r.get(block=False)
            except Empty:
                break
            got.append(it.id)
            r.commit(it)
    assert sorted(set(range(1, 41)) - set(got)) == list(range(lo, hi + 1))


def test_help_documents_the_exit_codes():
    out = cli("--help")
    assert out.returncode == 0
    for code in ("0 ", "1 ", "2 ", "130 "):
        assert f"  {code}" in out.stdout
    assert "exit status" in out.stdout.lower()


@pytest.mark.parametrize("command", (*COMMANDS, "serve", "qtest"))
def test_a_mistyped_option_prints_the_subcommands_usage(tmp_path, command):
    out = cli(command, "--jsn") if command == "qtest" else cli(command, str(tmp_path), "--jsn")
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr
    assert out.stderr.startswith(f"usage: journaled {command} "), out.stderr
    assert f"journaled {command}: error: unrecognized arguments: --jsn" in out.stderr
    assert os.listdir(tmp_path) == []  # nothing ran
