"""The journal on disk: rotation, reopening, torn tails, damage, ownership, names, tailing, locate."""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap

import pytest

from conftest import ready_items
from journaled import (
    CorruptJournal,
    InvalidName,
    ItemTooLarge,
    JournaledQueue,
    QueueConfig,
    QueueLocked,
    UnsupportedVersion,
)
from journaled.disk import fileio
from journaled.format.fallback import decode_many
from journaled.format.record import HEADER_FIXED_SIZE, Put, decode_header
from journaled.offline.scan import JournalScanner

NEVER = QueueConfig(sync="never")


def journal_files(qdir: str, name: str = "q") -> list[str]:
    """Journal file paths of queue ``name``, oldest first (numeric order of the ms suffix)."""
    pat = re.compile(re.escape(name) + r"\.(\d{1,20})")
    found = [(int(m.group(1)), e) for e in os.listdir(qdir) if (m := pat.fullmatch(e))]
    return [os.path.join(qdir, e) for _, e in sorted(found)]


def file_records(path: str) -> tuple[list[Put], int, object]:
    """Every record of one journal file, decoded straight from its bytes."""
    with open(path, "rb") as f:
        data = f.read()
    header = decode_header(data, path)
    recs, end, damage = decode_many(data, 0, header.salt, header.size)
    return [r for r in recs if isinstance(r, Put)], end, damage


def drain(q: JournaledQueue, reader: str = "t") -> list[tuple[int, bytes]]:
    """Everything a fresh reader (from the earliest item) gets, committed as it goes."""
    r = q.reader(reader)
    out = []
    for item in ready_items(r):
        r.commit(item)
        out.append((item.id, item.data))
    return out


def payload(i: int) -> bytes:
    return b"item-%d-" % i + bytes([i % 251]) * (i % 37)


def make_queue(qdir: str, n: int, config: QueueConfig = NEVER) -> None:
    with JournaledQueue(qdir, config=config, name="q") as q:
        for i in range(1, n + 1):
            assert q.put(payload(i)) == i


# ----------------------------------------------------------------------------- rotation
def test_rotation_never_splits_items_and_file_names_sort_by_creation(qdir):
    config = QueueConfig(sync="never", journal_size=400)
    with JournaledQueue(qdir, config=config, name="q") as q:
        ids = q.put_many([payload(i) for i in range(1, 31)])
        ids += [q.put(payload(i)) for i in range(31, 61)]
    assert ids == list(range(1, 61))
    files = journal_files(qdir)
    assert len(files) > 5
    names = [os.path.basename(p) for p in files]
    assert all(re.fullmatch(r"q\.\d{13,20}", n) for n in names)
    assert [int(n.split(".")[1]) for n in names] == sorted(int(n.split(".")[1]) for n in names)
    seen = []
    for path in files:
        recs, end, damage = file_records(path)
        # every file holds whole records only, ids consecutive from its header's first_id
        assert damage is None and end == os.path.getsize(path) <= 400
        with open(path, "rb") as f:
            first_id = decode_header(f.read(512)).first_id
        assert [r.id for r in recs] == list(range(first_id, first_id + len(recs)))
        seen += [(r.id, r.payload) for r in recs]
    assert seen == [(i, payload(i)) for i in range(1, 61)]


def test_item_larger_than_journal_size_gets_a_file_of_its_own(qdir):
    with JournaledQueue(qdir, config=QueueConfig(sync="never", journal_size=200), name="q") as q:
        q.put(b"a")
        q.put(b"B" * 1000)
        q.put(b"c")
        assert drain(q) == [(1, b"a"), (2, b"B" * 1000), (3, b"c")]
    sizes = [[r.id for r in file_records(p)[0]] for p in journal_files(qdir)]
    assert [2] in sizes


# ----------------------------------------------------------------------------- reopening
def test_reopen_appends_to_the_same_journal_with_the_next_id(qdir):
    make_queue(qdir, 5)
    before = journal_files(qdir)
    with JournaledQueue(qdir, config=NEVER) as q:  # the name is detected from the files
        assert q.name == "q"
        assert q.put_many([b"x", b"y"]) == [6, 7]
        assert drain(q) == [(i, payload(i)) for i in range(1, 6)] + [(6, b"x"), (7, b"y")]
        assert q.recovery_report == []
    assert journal_files(qdir) == before


def test_reader_named_with_digits_does_not_confuse_queue_name_detection(qdir):
    with JournaledQueue(qdir, config=NEVER, name="q") as q:
        q.reader("7")
        q.put(b"x")
    with JournaledQueue(qdir, config=NEVER) as q:
        assert q.name == "q"
        assert q.readers() == ["7"]


def test_lowering_max_item_size_on_reopen_keeps_larger_records(qdir):
    with JournaledQueue(qdir, config=NEVER, name="q") as q:
        q.put(b"L" * 5000)
        q.put(b"L" * 5000)
    with JournaledQueue(qdir, config=QueueConfig(sync="never", max_item_size=100)) as q:
        assert q.recovery_report == []
        assert [d for _, d in drain(q)] == [b"L" * 5000] * 2
        with pytest.raises(ItemTooLarge):
            q.put(b"L" * 101)


def test_an_item_larger_than_the_read_chunk_is_read_back(qdir):
    from journaled.log.journal import Cursor
    from journaled.log.walker import READ_CHUNK

    big = os.urandom(READ_CHUNK + 12345)
    with JournaledQueue(qdir, config=NEVER, name="q") as q:
        q.put(big)
        q.put(b"after")
    with JournaledQueue(qdir, config=NEVER) as q:
        j = q.journal
        jf = j.files[0]
        recs, cursor = j.read(Cursor(jf.ms, jf.header.size, 1))  # used to loop forever
        assert [r.payload for r in recs] == [big]
        recs, cursor = j.read(cursor)
        assert [r.payload for r in recs] == [b"after"]
        assert cursor.next_id == 3
        assert j.locate_time(0) == 1  # reads the first record with max_bytes=1


# ----------------------------------------------------------------------------- torn and damaged tails
def _last_record(path: str) -> Put:
    return file_records(path)[0][-1]


def test_torn_tail_at_every_byte_offset_of_the_last_record_is_cut(tmp_path, caplog):
    pristine = str(tmp_path / "pristine")
    make_queue(pristine, 3)
    [path] = journal_files(pristine)
    last = _last_record(path)
    assert last.id == 3
    for keep in range(last.size):  # bytes of the last record that reached the disk
        qdir = str(tmp_path / f"torn{keep}")
        shutil.copytree(pristine, qdir)
        os.truncate(journal_files(qdir)[0], last.offset + keep)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="journaled"):
            with JournaledQueue(qdir, config=NEVER) as q:
                report = q.recovery_report
                assert drain(q) == [(1, payload(1)), (2, payload(2))]
                assert q.put(b"next") == 3
        if keep:
            assert len(report) == 1
            event = report[0]
            assert event.path == journal_files(qdir)[0]
            assert (event.offset, event.bytes_lost) == (last.offset, keep)
            assert any(str(keep) in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
        else:
            assert report == []
        recs, end, damage = file_records(journal_files(qdir)[0])
        assert damage is None and [r.id for r in recs] == [1, 2, 3] and recs[-1].payload == b"next"


@pytest.mark.parametrize("zeros", [1, 8, 9, 4096])
def test_zero_filled_tail_is_cut_and_appending_continues(qdir, zeros):
    make_queue(qdir, 4)
    [path] = journal_files(qdir)
    good = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(bytes(zeros))
    with JournaledQueue(qdir, config=NEVER) as q:
        [event] = q.recovery_report
        assert (event.path, event.offset, event.bytes_lost) == (path, good, zeros)
        assert q.put(b"five") == 5
        assert [i for i, _ in drain(q)] == [1, 2, 3, 4, 5]
    assert file_records(path)[2] is None


def _flip(path: str, offset: int, bit: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([b ^ (1 << bit)]))


@pytest.mark.parametrize("recovery", ["point_in_time", "salvage"])
def test_flipped_bit_in_every_byte_of_a_record_header_is_never_delivered(tmp_path, recovery):
    pristine = str(tmp_path / "pristine")
    make_queue(pristine, 3)
    victim = file_records(journal_files(pristine)[0])[0][1]
    assert victim.id == 2
    for k in range(33):  # crc, length, type, then the PUT's id, add_ms, expire_ms
        qdir = str(tmp_path / f"flip{k}")
        shutil.copytree(pristine, qdir)
        path = journal_files(qdir)[0]
        _flip(path, victim.offset + k, k % 8)
        with JournaledQueue(qdir, config=QueueConfig(sync="never", recovery=recovery)) as q:
            got = drain(q)
            report = q.recovery_report
        assert (2, payload(2)) not in got
        assert got[0] == (1, payload(1))
        if recovery == "salvage":  # proven-intact later records are still delivered
            assert got == [(1, payload(1)), (3, payload(3))]
        assert report and report[0].path == path and report[0].offset == victim.offset


def test_strict_recovery_raises_corrupt_journal_naming_file_and_offset(qdir):
    make_queue(qdir, 3)
    path = journal_files(qdir)[0]
    victim = file_records(path)[0][1]
    _flip(path, victim.offset + 20, 3)
    with pytest.raises(CorruptJournal) as err:
        JournaledQueue(qdir, config=QueueConfig(sync="never", recovery="strict"))
    assert err.value.path == path and err.value.offset == victim.offset


@pytest.mark.parametrize("recovery", ["point_in_time", "salvage"])
def test_damage_in_an_older_file_is_reported_and_never_delivered(qdir, recovery):
    config = QueueConfig(sync="never", journal_size=300, recovery=recovery)
    make_queue(qdir, 30, config)
    files = journal_files(qdir)
    assert len(files) >= 3
    recs = file_records(files[0])[0]
    assert len(recs) >= 3
    victim = recs[1]
    _flip(files[0], victim.offset + 40, 0)  # inside the payload
    with JournaledQueue(qdir, config=config) as q:
        got = drain(q)
        report = q.recovery_report
    ids = [i for i, _ in got]
    assert victim.id not in ids
    assert all(data == payload(i) for i, data in got)
    assert any(e.path == files[0] and e.offset == victim.offset for e in report)
    later_files = {r.id for p in files[1:] for r in file_records(p)[0]}
    assert later_files <= set(ids)  # damage in one file never costs another file's items
    if recovery == "salvage":  # every proven-intact record after the damage is delivered
        assert ids == [i for i in range(1, 31) if i != victim.id]
    else:  # point in time: the file ends at the damage, the rest is kept aside, not delivered
        assert ids == [i for i in range(1, 31) if i < victim.id or i in later_files]


def write_version(path: str, version: int) -> None:
    """Make ``path`` a file of another format version: the version field changed under a header
    CRC that still verifies (a changed version byte alone is damage, rebuilt from the records)."""
    from crc32c import crc32c

    with open(path, "r+b") as f:
        name_len = int.from_bytes(f.read(HEADER_FIXED_SIZE)[32:34], "little")
        f.seek(0)
        head = bytearray(f.read(HEADER_FIXED_SIZE + name_len))
        head[8:10] = version.to_bytes(2, "little")
        f.seek(0)
        f.write(bytes(head) + crc32c(bytes(head)).to_bytes(4, "little"))


def test_file_of_an_unknown_format_version_refuses_open_and_is_left_alone(qdir):
    make_queue(qdir, 2)
    path = journal_files(qdir)[0]
    write_version(path, 2)
    with pytest.raises(UnsupportedVersion):
        JournaledQueue(qdir, config=NEVER)
    assert journal_files(qdir) == [path]


# ----------------------------------------------------------------------------- ownership
def test_second_owner_in_the_same_process_is_refused_with_our_pid(qdir):
    with JournaledQueue(qdir, config=NEVER):
        with pytest.raises(QueueLocked) as err:
            JournaledQueue(qdir, config=NEVER)
        assert err.value.pid == os.getpid()
        assert str(os.getpid()) in str(err.value)
    with JournaledQueue(qdir, config=NEVER):  # released on close
        pass


def test_second_process_becomes_a_client_of_the_holder(qdir):
    # another process does not get QueueLocked any more: it uses the queue through its owner
    code = textwrap.dedent(
        f"""
        import os, sys
        from journaled import JournaledQueue, QueueConfig
        q = JournaledQueue({qdir!r}, config=QueueConfig(sync="never"))
        print(os.getpid(), flush=True)
        sys.stdin.read()
        q.close()
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        pid = int(child.stdout.readline())
        with JournaledQueue(qdir, config=NEVER) as client:
            assert not client.is_owner and client.owner_pid == pid == child.pid
    finally:
        child.communicate("", timeout=60)
    assert child.returncode == 0
    with JournaledQueue(qdir, config=NEVER):
        pass


# ----------------------------------------------------------------------------- names and modes
BAD_NAMES = ["../x", "/abs", "a/b", ".hidden", "..", "", "x" * 129, "évents", "a b", "a\x00b", "tab\t"]


@pytest.mark.parametrize("bad", BAD_NAMES)
def test_invalid_queue_names_are_refused_and_create_nothing_outside(tmp_path, bad):
    qdir = tmp_path / "q"
    with pytest.raises(InvalidName):
        JournaledQueue(str(qdir), config=NEVER, name=bad)
    assert sorted(os.listdir(tmp_path)) == ["q"]
    assert [e for e in os.listdir(qdir) if not e.startswith(".")] == []


@pytest.mark.parametrize("bad", BAD_NAMES + [None, 7])
def test_invalid_reader_names_are_refused(qdir, bad):
    with JournaledQueue(qdir, config=NEVER, name="q") as q:
        before = sorted(os.listdir(qdir))
        with pytest.raises(InvalidName):
            q.reader(bad)
        assert sorted(os.listdir(qdir)) == before
        assert q.readers() == []


def test_longest_valid_names_work_and_a_too_long_pair_is_refused(qdir):
    name = "a" * 128
    with JournaledQueue(qdir, config=NEVER, name=name) as q:
        with pytest.raises(InvalidName, match="244"):
            q.reader("R:" + "b" * 115)  # ".<queue>.read.<reader>.tmp" would pass NAME_MAX
        assert q.readers() == []
        q.reader("R:" + "b" * 114)
        q.put(b"x")
    assert os.path.exists(journal_files(qdir, name)[0])
    with JournaledQueue(qdir, config=NEVER) as q:
        assert q.name == name and q.readers() == ["R:" + "b" * 114]


def test_files_are_created_with_mode_0600(qdir):
    with JournaledQueue(qdir, config=NEVER, name="q") as q:
        q.reader("r")
        q.put(b"x")
    entries = os.listdir(qdir)
    assert {"q.readers", "q.read.r", ".journaled.lock"} <= set(entries)
    for e in entries:
        assert stat.S_IMODE(os.stat(os.path.join(qdir, e)).st_mode) == 0o600, e


def test_file_mode_is_configurable(qdir):
    old = os.umask(0o022)
    try:
        with JournaledQueue(qdir, config=QueueConfig(sync="never", file_mode=0o640), name="q") as q:
            q.put(b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(journal_files(qdir)[0]).st_mode) == 0o640


# ----------------------------------------------------------------------------- bad input
def test_item_too_large_writes_nothing(qdir):
    with JournaledQueue(qdir, config=QueueConfig(sync="never", max_item_size=100), name="q") as q:
        q.put(b"ok")
        size = os.path.getsize(journal_files(qdir)[0])
        with pytest.raises(ItemTooLarge) as err:
            q.put(b"x" * 101)
        assert (err.value.size, err.value.limit) == (101, 100)
        with pytest.raises(ItemTooLarge):
            q.put_many([b"fine", b"x" * 101, b"fine too"])  # all or nothing
        q.sync()
        assert os.path.getsize(journal_files(qdir)[0]) == size
        assert q.put(b"x" * 100) == 2


@pytest.mark.parametrize("bad", ["text", 17, None, [b"a"], {"k": 1}])
def test_non_bytes_payload_raises_type_error_naming_what_was_given(qdir, bad):
    with JournaledQueue(qdir, config=NEVER, name="q") as q:
        with pytest.raises(TypeError, match=type(bad).__name__):
            q.put(bad)
        assert q.put(bytearray(b"ba")) == 1
        assert q.put(memoryview(b"mv")) == 2
        assert drain(q) == [(1, b"ba"), (2, b"mv")]


# ----------------------------------------------------------------------------- locate
def test_locate_finds_every_id_across_files_reading_at_most_one_file(qdir):
    config = QueueConfig(sync="never", journal_size=1500)
    make_queue(qdir, 300, config)

    class CountingOps(fileio.FileOps):
        read = 0

        def pread(self, fd: int, size: int, offset: int) -> bytes:
            data = super().pread(fd, size, offset)
            self.read += len(data)
            return data

    with JournaledQueue(qdir, config=config) as q:
        j = q.journal
        assert len(j.files) > 10
        for item_id in range(1, 301):
            ops = CountingOps()
            with fileio.use(ops):
                cursor = j.locate(item_id)
            assert cursor.next_id == item_id
            assert ops.read <= config.journal_size  # a file pick, then a scan inside one file
            recs, _ = j.read(cursor, max_items=1)
            assert (recs[0].id, recs[0].payload) == (item_id, payload(item_id))
        assert j.locate(301).next_id == 301  # the end
        assert j.read(j.locate(301))[0] == []


# ----------------------------------------------------------------------------- tailing reader process
TAILER = textwrap.dedent(
    """
    import sys, time
    from journaled.offline.scan import JournalScanner

    qdir, total = sys.argv[1], int(sys.argv[2])

    def payload(i):
        return b"item-%d-" % i + bytes([i % 251]) * (i % 37)

    scanner = JournalScanner(qdir, "q")
    next_id, passes = 1, 0
    print("ready", flush=True)
    deadline = time.monotonic() + 120
    while next_id <= total and time.monotonic() < deadline:
        passes += 1
        for rec in scanner.records(next_id):
            if rec.id != next_id or rec.payload != payload(rec.id):
                print("BAD", rec.id, next_id, flush=True)
                sys.exit(1)
            next_id += 1
    if scanner.damage:
        print("DAMAGE", scanner.damage, flush=True)
        sys.exit(1)
    print("seen", next_id - 1, "passes", passes, flush=True)
    """
)


def test_a_reader_process_tailing_never_sees_a_partial_record(qdir):
    total = 3000
    config = QueueConfig(sync="never", journal_size=8000)
    with JournaledQueue(qdir, config=config, name="q") as q:
        q.put(payload(1))
        child = subprocess.Popen(
            [sys.executable, "-c", TAILER, qdir, str(total)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert child.stdout.readline().strip() == "ready"
            i = 2
            while i <= total:  # small and mixed batches, so the tailer meets records in flight
                batch = [payload(k) for k in range(i, min(total, i + (i % 7)) + 1)]
                q.put_many(batch)
                i += len(batch)
            out, _ = child.communicate(timeout=150)
        finally:
            if child.poll() is None:
                child.kill()
    assert child.returncode == 0, out
    assert out.startswith(f"seen {total} "), out


def test_scanner_treats_a_record_in_flight_as_not_yet_and_delivers_it_once_complete(qdir):
    from journaled.format.record import encode_put

    make_queue(qdir, 2)
    [path] = journal_files(qdir)
    with open(path, "rb") as f:
        header = decode_header(f.read(512))
    end = os.path.getsize(path)
    rec = encode_put(header.salt, end, 3, 1, 0, payload(3))
    for k in range(len(rec)):  # every prefix the writer's append may have reached
        with open(path, "r+b") as f:
            f.truncate(end)
            f.seek(end)
            f.write(rec[:k])
        scanner = JournalScanner(qdir, "q")
        assert [r.id for r in scanner.records()] == [1, 2]
        assert scanner.damage == []
    with open(path, "ab") as f:
        f.write(rec[len(rec) - 1 :])
    assert [(r.id, r.payload) for r in JournalScanner(qdir, "q").records(2)] == [
        (2, payload(2)),
        (3, payload(3)),
    ]


def test_scanner_treats_a_newest_file_without_its_header_yet_as_not_yet(qdir):
    make_queue(qdir, 2)
    [path] = journal_files(qdir)
    ms = int(path.rsplit(".", 1)[1])
    open(os.path.join(qdir, f"q.{ms + 1}"), "wb").close()  # created, header not written yet
    scanner = JournalScanner(qdir, "q")
    assert [r.id for r in scanner.records()] == [1, 2]
    assert scanner.damage == []


def test_scanner_reports_damage_before_the_tail_and_never_delivers_it(qdir):
    make_queue(qdir, 3)
    [path] = journal_files(qdir)
    victim = file_records(path)[0][1]
    _flip(path, victim.offset + 35, 2)
    scanner = JournalScanner(qdir, "q")
    assert [r.id for r in scanner.records()] == [1, 3]
    assert [(d.path, d.offset) for d in scanner.damage] == [(path, victim.offset)]


def test_scanner_refuses_a_file_of_an_unknown_version(qdir):
    make_queue(qdir, 1)
    [path] = journal_files(qdir)
    write_version(path, 7)
    with pytest.raises(UnsupportedVersion):
        list(JournalScanner(qdir, "q").records())


def independent_reader(path: str) -> list[tuple[int, int, int, bytes]]:
    """A reader written from docs/format.md alone (struct + crc32c, nothing from journaled)."""
    import struct

    from crc32c import crc32c

    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89JRNL\r\n\x1a"
    version, header_len, salt, first_id, created_ms, name_len = struct.unpack_from("<HHIQQH", data, 8)
    assert version == 1 and header_len == 38 + name_len
    assert struct.unpack_from("<I", data, 34 + name_len)[0] == crc32c(data[: 34 + name_len])
    out, off = [], header_len
    while off + 9 <= len(data):
        crc, length, rtype = struct.unpack_from("<IIB", data, off)
        end = off + 9 + length
        if rtype == 0 or end > len(data) or crc32c(data[off + 4 : end], (salt ^ off) & 0xFFFFFFFF) != crc:
            break
        if rtype == 1:
            item_id, add_ms, expire_ms = struct.unpack_from("<QQQ", data, off + 9)
            out.append((item_id, add_ms, expire_ms, data[off + 33 : end]))
        off = end
    return out


def test_a_reader_built_from_format_md_alone_reads_what_the_queue_wrote(qdir):
    with JournaledQueue(qdir, config=QueueConfig(sync="never", journal_size=500), name="q") as q:
        for i in range(1, 41):
            q.put(payload(i), ttl=60 if i % 3 == 0 else None)
    got = [rec for path in journal_files(qdir) for rec in independent_reader(path)]
    assert [(i, p) for i, _, _, p in got] == [(i, payload(i)) for i in range(1, 41)]
    assert all((e != 0) == (i % 3 == 0) and (e == 0 or e == a + 60_000) for i, a, e, _ in got)
