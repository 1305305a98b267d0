"""Safe in everyday use: the default recovery keeps every intact record, a damaged file header is
recovered, files we did not write are never touched, and ``journaled check`` on a live queue that
is archiving never reports damage."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import ready_items
from journaled import JournaledQueue, QueueConfig
from journaled.cli.main import main
from journaled.errors import ForeignFile
from journaled.format.record import PUT_OVERHEAD, header_size
from journaled.offline.repair import check_dir
from journaled.offline.scan import JournalScanner
from journaled.offline.segments import QueueView, iter_records

pytestmark = pytest.mark.usefixtures("quiet")

PAYLOAD = 40
REC = PUT_OVERHEAD + PAYLOAD


def payload(i: int) -> bytes:
    return (b"item-%06d-" % i).ljust(PAYLOAD, b"x")


def fill(path: str, n: int, per_file: int | None = None) -> list[str]:
    size = header_size("q") + per_file * REC if per_file else 64 * 1024 * 1024
    with JournaledQueue(path, QueueConfig(sync="never", journal_size=size), name="q") as q:
        q.reader("r")
        for i in range(1, n + 1):
            assert q.put(payload(i)) == i
    return sorted(glob.glob(os.path.join(path, "q.[0-9]*")), key=lambda p: int(p.rsplit(".", 1)[1]))


def record_offset(files: list[str], item_id: int, per_file: int | None = None) -> tuple[str, int]:
    if per_file is None:
        return files[0], header_size("q") + (item_id - 1) * REC
    k, j = divmod(item_id - 1, per_file)
    return files[k], header_size("q") + j * REC


def flip(path: str, offset: int, n: int = 4) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        data = f.read(n)
        f.seek(offset)
        f.write(bytes(b ^ 0xFF for b in data))


def drain(path: str, **config) -> tuple[list[int], list]:
    with JournaledQueue(path, QueueConfig(**config), name="q") as q:
        r = q.reader("r")
        got = []
        for item in ready_items(r):
            assert item.data == payload(item.id)
            got.append(item.id)
            r.commit(item)
        return got, list(q.recovery_report)


def lost_by(events) -> list[tuple[int, int]]:
    return [e.ids_lost for e in events if e.ids_lost]


# ------------------------------------------------------------------------------------------ 2
def test_default_open_skips_exactly_a_damaged_middle_record_of_the_newest_file(tmp_path, capsys):
    path = str(tmp_path / "q")
    files = fill(path, 2000)
    f, off = record_offset(files, 502)
    flip(path=f, offset=off + 20)  # 4 bytes inside record 502's body
    # check predicts what the open will do: exactly id 502 lost
    assert main(["check", path]) == 1
    out = capsys.readouterr().out
    assert "ids 502..502" in out
    got, events = drain(path)
    assert got == [i for i in range(1, 2001) if i != 502]
    assert lost_by(events) == [(502, 502)]
    # the queue keeps working after the skipped record, with fresh ids
    with JournaledQueue(path, name="q") as q:
        assert q.put(b"new") == 2001


def test_default_read_skips_exactly_a_damaged_middle_record_of_an_older_file(tmp_path):
    path = str(tmp_path / "q")
    files = fill(path, 60, per_file=20)
    assert len(files) == 3
    f, off = record_offset(files, 25, per_file=20)
    flip(path=f, offset=off)  # the record's CRC itself
    report = check_dir(path)
    assert [x.ids_lost for x in report.findings] == [(25, 25)]
    got, events = drain(path)
    assert got == [i for i in range(1, 61) if i != 25]
    assert lost_by(events) == [(25, 25)]


def test_a_damaged_last_record_of_an_older_file_reports_its_id(tmp_path):
    path = str(tmp_path / "q")
    files = fill(path, 60, per_file=20)
    f, off = record_offset(files, 40, per_file=20)
    flip(path=f, offset=off + 30)
    report = check_dir(path)
    assert [x.ids_lost for x in report.findings] == [(40, 40)]
    got, events = drain(path)
    assert got == [i for i in range(1, 61) if i != 40]
    assert lost_by(events) == [(40, 40)]


def test_every_reader_agrees_with_the_default_open_on_a_damaged_queue(tmp_path):
    path = str(tmp_path / "q")
    files = fill(path, 100, per_file=30)
    for item_id in (7, 45, 46, 80):
        f, off = record_offset(files, item_id, per_file=30)
        flip(path=f, offset=off + 12)
    expected = [i for i in range(1, 101) if i not in (7, 45, 46, 80)]
    scanner = JournalScanner(path, "q")
    assert [r.id for r in scanner.records()] == expected
    view = QueueView(path, "q")
    spark = []
    for sf in view.files:
        fd = os.open(sf.path, os.O_RDONLY)
        try:
            spark += [
                r.id for r in iter_records(fd, sf.header.salt, sf.header.size, sf.size, sf.header.first_id)
            ]
        finally:
            os.close(fd)
    assert spark == expected
    report = check_dir(path)
    assert sorted(x.ids_lost for x in report.findings) == [(7, 7), (45, 46), (80, 80)]
    got, events = drain(path)
    assert got == expected
    assert sorted(lost_by(events)) == [(7, 7), (45, 46), (80, 80)]


def test_a_torn_tail_of_the_newest_file_is_still_cut(tmp_path):
    path = str(tmp_path / "q")
    files = fill(path, 50)
    with open(files[-1], "r+b") as f:
        f.truncate(os.path.getsize(files[-1]) - 10)
    got, events = drain(path)
    assert got == list(range(1, 50))
    assert [e.action for e in events] == ["truncated-tail"]
    with JournaledQueue(path, name="q") as q:
        assert q.put(b"next") == 50


def test_point_in_time_is_still_available_on_request(tmp_path):
    path = str(tmp_path / "q")
    files = fill(path, 100)
    f, off = record_offset(files, 60)
    flip(path=f, offset=off + 20)
    got, _ = drain(path, recovery="point_in_time")
    assert got == list(range(1, 60))


# ------------------------------------------------------------------------------------------ 3
@pytest.mark.parametrize(
    "where", [8, 12 + 2, 34 + 1, header_size("q") - 2], ids=["version", "salt-high", "name", "crc"]
)
def test_a_damaged_header_byte_is_recovered_from_the_records(tmp_path, where, capsys):
    path = str(tmp_path / "q")
    files = fill(path, 60, per_file=20)
    for f in (files[0], files[-1]):
        with open(f, "r+b") as fh:
            fh.seek(where)
            b = fh.read(1)
            fh.seek(where)
            fh.write(bytes([b[0] ^ 0x5A]))
    assert main(["check", path]) == 1
    assert "header" in capsys.readouterr().out
    assert [r.id for r in JournalScanner(path, "q").records()] == list(range(1, 61))
    got, events = drain(path)
    assert got == list(range(1, 61))
    assert {e.action for e in events} == {"recovered-header"}
    with JournaledQueue(path, name="q") as q:  # appending to the recovered newest file works
        assert q.put(payload(61)) == 61
    got, _ = drain(path)
    assert got == [61]


def test_a_file_with_our_magic_and_no_valid_record_is_set_aside_not_deleted(tmp_path):
    path = str(tmp_path / "q")
    files = fill(path, 40, per_file=20)
    with open(files[0], "r+b") as fh:
        fh.seek(10)
        fh.write(b"\xff" * (os.path.getsize(files[0]) - 10))  # header and every record destroyed
    got, events = drain(path)
    assert got == list(range(21, 41))
    assert [e.action for e in events] == ["skipped-file"]
    assert os.path.exists(files[0] + ".damaged")


def test_a_genuine_future_version_is_still_refused(tmp_path):
    from journaled.errors import UnsupportedVersion
    from journaled.format.record import FileHeader, encode_header

    path = str(tmp_path / "q")
    files = fill(path, 5)
    raw = bytearray(encode_header(FileHeader(salt=1, first_id=1, created_ms=1, name="q")))
    raw[8] = 2
    from crc32c import crc32c

    raw[-4:] = crc32c(bytes(raw[:-4])).to_bytes(4, "little")
    with open(files[0], "r+b") as fh:
        fh.write(bytes(raw))
    with pytest.raises(UnsupportedVersion):
        JournaledQueue(path, name="q")


# ------------------------------------------------------------------------------------------ 4
def test_a_rotated_log_named_like_a_journal_is_never_adopted_or_renamed(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    text = b"2024-01-01 12:00:00 INFO started\n" * 50
    (d / "app.1").write_bytes(text)
    with JournaledQueue(str(d)) as q:
        assert q.name == "logs"
        q.put(b"x")
    assert (d / "app.1").read_bytes() == text
    assert not glob.glob(str(d / "app.1.*"))
    with JournaledQueue(str(d)) as q:  # reopening detects our queue, not the log
        assert q.name == "logs"


def test_a_foreign_file_named_like_our_journal_refuses_the_open(tmp_path):
    d = tmp_path / "q"
    d.mkdir()
    (d / "app.1").write_bytes(b"not a journal at all, just text\n" * 10)
    before = (d / "app.1").read_bytes()
    with pytest.raises(ForeignFile) as exc:
        JournaledQueue(str(d), name="app")
    assert "app.1" in str(exc.value)
    assert (d / "app.1").read_bytes() == before
    assert [e for e in os.listdir(d) if not e.startswith(".")] == ["app.1"]


def test_a_foreign_file_among_our_journals_is_left_alone_and_refuses_the_open(tmp_path):
    path = str(tmp_path / "q")
    fill(path, 10)
    stray = os.path.join(path, "q.1")
    with open(stray, "wb") as f:
        f.write(b"hello")
    with pytest.raises(ForeignFile):
        JournaledQueue(path, name="q")
    with open(stray, "rb") as f:
        assert f.read() == b"hello"


def test_queue_name_detection_ignores_files_that_are_not_journals(tmp_path):
    path = str(tmp_path / "events")
    fill(path, 3)  # a queue named "q" in a directory named "events"
    with open(os.path.join(path, "app.7"), "wb") as f:
        f.write(b"rotated log")
    with JournaledQueue(path) as q:
        assert q.name == "q"
    assert JournalScanner(path).name == "q"


# ----------------------------------------------------------------------------------------- 13
OWNER = """
import sys, time
from journaled import Empty, JournaledQueue, QueueConfig
path, archive, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
cfg = QueueConfig(sync="never", journal_size=size, archive_dir=archive, checkpoint_interval=0.001)
with JournaledQueue(path, cfg, name="q") as q:
    r = q.reader("r")
    print("ready", flush=True)
    i = 0
    while True:
        i += 1
        q.put(b"%040d" % i)
        try:
            r.commit(r.get(block=False))
        except Empty:
            pass
        if i % 5 == 0:
            q.checkpoint()
"""


RUNS = 200


def test_check_never_reports_damage_on_a_healthy_queue_being_archived(tmp_path, capsys):
    path = str(tmp_path / "q")
    archive = str(tmp_path / "archive")
    os.mkdir(archive)
    size = header_size("q") + 3 * REC
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), *sys.path]))
    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER, path, archive, str(size)], stdout=subprocess.PIPE, env=env
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        while len(os.listdir(archive)) < 3:
            time.sleep(0.01)
        codes = []
        for _ in range(RUNS):
            try:
                codes.append(main(["check", path]))
            except OSError as exc:
                codes.append(repr(exc))
    finally:
        proc.kill()
        proc.wait()
    out = capsys.readouterr().out
    assert codes == [0] * RUNS, out
    assert "damage" not in out


def test_every_bit_of_a_file_header_flipped_loses_nothing_by_default(tmp_path):
    base = str(tmp_path / "base")
    files = fill(base, 40, per_file=20)
    hsize = header_size("q")
    for which in (0, 1):
        for bit in range(0, hsize * 8, 3):
            d = str(tmp_path / f"c{which}-{bit}")
            shutil.copytree(base, d)
            victim = os.path.join(d, os.path.basename(files[which]))
            with open(victim, "r+b") as fh:
                fh.seek(bit // 8)
                b = fh.read(1)[0] ^ (1 << bit % 8)
                fh.seek(bit // 8)
                fh.write(bytes([b]))
            got, events = drain(d)
            assert got == list(range(1, 41)), (which, bit)
            assert [e.action for e in events] == ["recovered-header"], (which, bit)


def test_repair_rewrites_a_damaged_header_and_check_is_then_clean(tmp_path, capsys):
    path = str(tmp_path / "q")
    files = fill(path, 40, per_file=20)
    with open(files[0], "r+b") as fh:
        fh.seek(8)
        fh.write(b"\x07")  # the version byte
    assert main(["check", path]) == 1
    assert main(["repair", path]) == 0
    assert main(["check", path]) == 0
    got, events = drain(path, recovery="strict")
    assert got == list(range(1, 41)) and events == []


def test_check_names_a_foreign_file_and_repair_leaves_it_alone(tmp_path, capsys):
    path = str(tmp_path / "q")
    fill(path, 5)
    stray = os.path.join(path, "q.2")
    with open(stray, "wb") as f:
        f.write(b"some log line\n")
    assert main(["check", path]) == 1
    assert "foreign-file" in capsys.readouterr().out
    main(["repair", path])
    with open(stray, "rb") as f:
        assert f.read() == b"some log line\n"
