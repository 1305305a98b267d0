"""The de-duplication window holds for as long as it says, whatever archiving does.

Journal files are archived as soon as every reader has passed them, the normal state of a
healthy queue; the keys of their records used to be forgotten with them, so after a reopen (or
a change of owner) a key put again a second later, well within the window, was stored and
delivered again.  Before archiving, the owner now writes the keys of the window to
``<queue>.dedup`` (docs/format.md, section 16), which the next owner reads back."""

from __future__ import annotations

import logging
import os
import struct
import threading
import time

import pytest
from crc32c import crc32c

from journaled import Empty, JournaledQueue, QueueConfig
from journaled.disk import dedupindex, fileio
from journaled.errors import CorruptJournal, UnsupportedVersion
from journaled.owner import putpath

WINDOW = QueueConfig(dedup_window=3600.0, journal_size=4096, checkpoint_interval=3600.0)
KEYS = [b"order-%d" % i for i in range(40)]


def _put_read_and_archive(q: JournaledQueue, keys: list[bytes] = KEYS) -> list[int]:
    """Put one 300-byte item per key (over several journal files), read and commit them all,
    then archive: only the newest journal file is left."""
    r = q.reader("r")
    ids = q.put_many([b"x" * 300 for _ in keys], keys=keys)
    for _ in keys:
        r.commit(r.get(block=False))
    q.checkpoint()
    q.archive()
    assert q.journal.first_id() >= ids[len(ids) // 2], "most of the keyed records should be archived"
    return ids


def _delivered(q: JournaledQueue) -> list[bytes]:
    r = q.reader("r")
    out = []
    while True:
        try:
            item = r.get(block=False)
        except Empty:
            return out
        out.append(item.data)
        r.commit(item)


def test_keys_of_archived_journal_files_are_still_deduplicated_after_reopen(tmp_path) -> None:
    path = str(tmp_path / "q")
    with JournaledQueue(path, WINDOW) as q:
        ids = _put_read_and_archive(q)
    with JournaledQueue(path, WINDOW) as q:
        again = q.put_many([b"again"] * len(KEYS), keys=KEYS)
        stored = q.stats().put
        assert (sum(a == b for a, b in zip(again, ids)), stored) == (len(KEYS), 0), (
            f"{len(KEYS) - sum(a == b for a, b in zip(again, ids))} of {len(KEYS)} keys put again "
            f"within the window got new ids; {stored} stored again"
        )
        assert q.put(b"again", key=KEYS[0]) == ids[0]
        assert _delivered(q) == []


def test_a_new_owner_in_another_process_keeps_the_keys_of_archived_files(tmp_path) -> None:
    import subprocess
    import sys
    import textwrap

    from support.paths import ROOT

    path = str(tmp_path / "q")
    with JournaledQueue(path, WINDOW) as q:
        ids = _put_read_and_archive(q)
    code = textwrap.dedent(
        f"""
        from journaled import JournaledQueue
        with JournaledQueue({path!r}) as q:  # its own config says nothing of de-duplication
            print(q.put(b"again", key=b"order-0"), q.stats().put)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=ROOT),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(ids[0]), "0"]


def test_retention_archiving_keeps_the_keys_too(tmp_path) -> None:
    path = str(tmp_path / "q")
    cfg = QueueConfig(dedup_window=3600.0, journal_size=4096, retention_bytes=4096)
    with JournaledQueue(path, cfg) as q:  # no reader at all: only retention archives
        ids = q.put_many([b"x" * 300 for _ in KEYS], keys=KEYS)
        q.archive()
        assert q.journal.first_id() >= ids[len(ids) // 2]
    with JournaledQueue(path, cfg) as q:
        assert q.put_many([b"again"] * len(KEYS), keys=KEYS) == ids


def test_the_index_keeps_only_the_window(tmp_path, monkeypatch) -> None:
    """Keys older than the window are dropped from the file when it is written, and ignored
    when it is read back; a key put again after its window is stored again."""
    clock_ns = [time.time_ns()]
    monkeypatch.setattr(putpath, "CLOCK", type("T", (), {"time_ns": staticmethod(lambda: clock_ns[0])}))
    monkeypatch.setattr(dedupindex, "now_ms", lambda: clock_ns[0] // 1_000_000)
    path = str(tmp_path / "q")
    cfg = QueueConfig(dedup_window=10.0, journal_size=4096, checkpoint_interval=3600.0)
    with JournaledQueue(path, cfg) as q:
        old = _put_read_and_archive(q, [b"old-%d" % i for i in range(20)])
        clock_ns[0] += 6 * 10**9
        young = _put_read_and_archive(q, [b"young-%d" % i for i in range(20)])
        index = dedupindex.read_index(dedupindex.index_path(path, q.name))
        assert index is not None
        assert {k for k, _i, _t in index.entries} == {b"old-%d" % i for i in range(20)} | {
            b"young-%d" % i for i in range(20)
        }
        clock_ns[0] += 6 * 10**9  # "old" is 12 s old, "young" 6 s
        _put_read_and_archive(q, [b"later-%d" % i for i in range(20)])
        index = dedupindex.read_index(dedupindex.index_path(path, q.name))
        assert index is not None
        assert not any(k.startswith(b"old-") for k, _i, _t in index.entries), "pruned to the window"
    with JournaledQueue(path, cfg) as q:
        assert q.put(b"y", key=b"young-0") == young[0]
        assert q.put(b"o", key=b"old-0") != old[0]  # outside the window: stored again


def test_a_damaged_index_is_logged_and_the_journal_alone_is_used(tmp_path, caplog) -> None:
    path = str(tmp_path / "q")
    with JournaledQueue(path, WINDOW) as q:
        ids = _put_read_and_archive(q)
        name = q.name
    index = dedupindex.index_path(path, name)
    raw = bytearray(fileio.ops.read_file(index))
    raw[40] ^= 0xFF
    with open(index, "wb") as f:
        f.write(raw)
    with caplog.at_level(logging.WARNING, logger="journaled"):
        with JournaledQueue(path, WINDOW) as q:
            # the keys still in the journal are known; those only the damaged file had are not
            assert q.put(b"again", key=KEYS[-1]) == ids[-1]
    assert any("dedup index" in r.getMessage() and "CRC" in r.getMessage() for r in caplog.records)
    assert os.path.exists(index), "a damaged file is never deleted (it is replaced when written)"


def test_entries_the_journal_still_holds_are_taken_from_the_journal(tmp_path) -> None:
    """The index matters only for ids below the journal's first id: for the others the journal
    is the truth (an index written before a crash may name ids its journal lost)."""
    path = str(tmp_path / "q")
    with JournaledQueue(path, WINDOW) as q:
        q.reader("r")
        kept = q.put(b"kept", key=b"kept")
        name = q.name
    stale = dedupindex.encode_index([b"gone"], [kept + 5], [int(time.time() * 1000)], 3_600_000, 0)
    fileio.write_atomic(dedupindex.index_path(path, name), stale)
    with JournaledQueue(path, WINDOW) as q:
        assert q.put(b"k", key=b"kept") == kept
        assert q.put(b"new", key=b"gone") == kept + 1  # the index's id is not in the journal


def test_the_file_layout_is_as_format_md_says() -> None:
    raw = dedupindex.encode_index([b"ab", b"c"], [7, 9], [1000, 1001], 60_000, 2000)
    body = (
        b"\x89JDDP\r\n\x1a"
        + struct.pack("<HHQQI", 1, 0, 60_000, 2000, 2)
        + struct.pack("<QQ", 7, 9)
        + struct.pack("<QQ", 1000, 1001)
        + struct.pack("<HH", 2, 1)
        + b"abc"
    )
    assert raw == body + struct.pack("<I", crc32c(body))
    index = dedupindex.decode_index(raw)
    entries = ((b"ab", 7, 1000), (b"c", 9, 1001))
    assert (index.window_ms, index.written_ms, index.entries) == (60_000, 2000, entries)
    empty = dedupindex.encode_index([], [], [], 60_000, 2000)
    assert len(empty) == 36 and dedupindex.decode_index(empty).entries == ()


def _with_crc(body: bytes) -> bytes:
    return body + struct.pack("<I", crc32c(body))


@pytest.mark.parametrize(
    ("damage", "error"),
    [
        (lambda b: b[:-1], CorruptJournal),
        (lambda b: b + b"\0", CorruptJournal),
        (lambda b: b"\x89JCKP\r\n\x1a" + b[8:], CorruptJournal),
        (lambda b: b[:-4] + bytes(4), CorruptJournal),
        (lambda b: b[:8] + b"\x02\x00" + b[10:], UnsupportedVersion),
        (lambda b: b[:28] + struct.pack("<I", 3) + b[32:], CorruptJournal),
        (lambda b: _with_crc(b[:64] + struct.pack("<H", 0) + b[66:-4]), CorruptJournal),
        (lambda b: _with_crc(b[:64] + struct.pack("<H", 1025) + b[66:-4]), CorruptJournal),
        (lambda b: _with_crc(b[:64] + struct.pack("<H", 3) + b[66:-4]), CorruptJournal),
    ],
)
def test_a_damaged_file_is_a_typed_error(damage, error) -> None:  # type: ignore[no-untyped-def]
    raw = dedupindex.encode_index([b"ab", b"c"], [7, 9], [1000, 1001], 60_000, 2000)
    with pytest.raises(error):
        dedupindex.decode_index(damage(raw))


@pytest.mark.parametrize("tagged", [False, True], ids=["key", "producer tag"])
def test_under_sync_always_a_put_answered_from_the_window_returns_once_the_first_is_durable(
    tmp_path, monkeypatch, tagged
) -> None:
    """The first put is appended, then waits for its fsync; a second put of the same key (or a
    client's retry with the same tag) is answered from memory with the first one's id, and must
    not return before that id is durable either."""
    release = threading.Event()
    syncing = threading.Event()
    real_fdatasync = fileio.ops.fdatasync

    def slow_fdatasync(fd: int) -> None:
        syncing.set()
        release.wait(10)
        real_fdatasync(fd)

    path = str(tmp_path / "q")
    cfg = QueueConfig(sync="always", dedup_window=3600.0)
    with JournaledQueue(path, cfg) as q:
        q.put(b"warm-up", key=b"warm-up")  # the file exists and is synced once
        monkeypatch.setattr(fileio.ops, "fdatasync", slow_fdatasync)

        def put() -> int:
            if tagged:
                return q.put_many([b"x"], producer=(42, 0))[0]
            return q.put(b"x", key=b"k")

        results: dict[str, int] = {}
        first = threading.Thread(target=lambda: results.setdefault("first", put()))
        first.start()
        assert syncing.wait(10), "the first put never reached its fsync"
        second = threading.Thread(target=lambda: results.setdefault("second", put()))
        second.start()
        second.join(0.5)
        returned_early = "second" in results
        release.set()
        first.join(10)
        second.join(10)
        assert not returned_early, "the repeated put returned before the first one was durable"
        assert results["first"] == results["second"]


def test_a_directory_in_place_of_the_index_is_logged_and_left_alone(tmp_path, caplog) -> None:
    path = str(tmp_path / "q")
    with JournaledQueue(path, WINDOW) as q:
        first = q.put(b"x", key=b"k")
        name = q.name
    os.mkdir(dedupindex.index_path(path, name))
    with caplog.at_level(logging.WARNING, logger="journaled"):
        with JournaledQueue(path, WINDOW) as q:
            assert q.put(b"y", key=b"k") == first  # still in the journal
    assert any("cannot be read" in r.getMessage() for r in caplog.records)
    assert os.path.isdir(dedupindex.index_path(path, name))


def test_a_planted_link_in_place_of_the_index_is_refused_never_followed(tmp_path) -> None:
    from journaled.errors import UnsafeDirectory

    path = str(tmp_path / "q")
    with JournaledQueue(path, WINDOW) as q:
        name = q.name
    target = tmp_path / "elsewhere"
    target.write_bytes(b"not ours")
    os.symlink(target, dedupindex.index_path(path, name))
    with pytest.raises(UnsafeDirectory):
        JournaledQueue(path, WINDOW)
    assert target.read_bytes() == b"not ours"
