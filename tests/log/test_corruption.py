"""Corruption fuzzing: every kind of damaged journal or checkpoint opens with the least loss its
recovery mode allows, never delivers a corrupt item and never raises anything but journaled's
own errors."""

from __future__ import annotations

import glob
import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import scratch_dir
from journaled import Empty, JournaledQueue, QueueConfig
from journaled.errors import CorruptJournal, JournaledError, UnsupportedVersion
from journaled.format.record import PUT_OVERHEAD

MODES = ("point_in_time", "tolerate_tail", "strict", "salvage")
N = 12


def payload(i: int) -> bytes:
    return b"item-%03d-" % i + bytes([65 + i % 26]) * 40


pytestmark = pytest.mark.usefixtures("quiet")


@pytest.fixture(scope="module")
def work():
    with scratch_dir("corrupt-") as d:
        yield d


@pytest.fixture(scope="module")
def base(work):
    """Two journal files (ids 1..6 and 7..12), reader 'all' untouched, reader 'r' with a
    checkpoint (an older copy of which is kept as ``old-ckpt``)."""
    path = os.path.join(work, "base", "q")
    size = 40 + 6 * (PUT_OVERHEAD + len(payload(0)))
    with JournaledQueue(path, QueueConfig(sync="always", journal_size=size), name="q") as q:
        q.reader("all")
        r = q.reader("r")
        for i in range(1, N + 1):
            assert q.put(payload(i)) == i
        for _ in range(3):
            r.commit(r.get(block=False))
        q.checkpoint()
        shutil.copy(os.path.join(path, "q.read.r"), os.path.join(work, "old-ckpt"))
        for _ in range(4):
            r.commit(r.get(block=False))
    files = sorted(glob.glob(os.path.join(path, "q.[0-9]*")))
    assert len(files) == 2
    return path


_count = [0]


def clone(work: str, base: str) -> str:
    _count[0] += 1
    d = os.path.join(work, f"c{_count[0]}", "q")
    shutil.copytree(base, d)
    return d


def journal_files(path: str) -> list[str]:
    return sorted(p for p in glob.glob(os.path.join(path, "q.[0-9]*")) if p.rsplit(".", 1)[-1].isdigit())


def mutate(path: str, which: int, fn) -> None:
    f = journal_files(path)[which]
    with open(f, "rb") as fh:
        data = bytearray(fh.read())
    data = fn(data)
    with open(f, "wb") as fh:
        fh.write(data)


def open_and_drain(path: str, mode: str, reader: str = "all") -> list[int] | CorruptJournal:
    """Deliveries of ``reader`` (checked intact and in order), or the CorruptJournal refusal."""
    try:
        q = JournaledQueue(path, QueueConfig(recovery=mode), name="q")
    except CorruptJournal as exc:
        return exc
    except Exception as exc:  # pragma: no cover - the assertion is the point
        raise AssertionError(f"non-journaled exception {exc!r}") from exc
    try:
        r = q.reader(reader)
        got: list[int] = []
        while True:
            try:
                it = r.get(block=False)
            except Empty:
                break
            assert it.data == payload(it.id), f"corrupt delivery of id {it.id}"
            assert not got or it.id > got[-1], "order"
            got.append(it.id)
            r.commit(it)
        new = q.put(b"after")  # still usable
        assert new > N or new not in got
        assert r.get(block=False).data == b"after"
        return got
    except JournaledError as exc:
        if mode in ("strict", "tolerate_tail") and isinstance(exc, CorruptJournal):
            return exc
        raise
    finally:
        q.close()


def record_offsets(path: str, which: int) -> list[int]:
    """Start offsets of the records of journal file ``which`` (all the same size here)."""
    f = journal_files(path)[which]
    size = os.path.getsize(f)
    rec = PUT_OVERHEAD + len(payload(0))
    header = size - 6 * rec
    return [header + k * rec for k in range(6)]


ALL = list(range(1, N + 1))


def test_truncation_at_every_byte_of_the_last_record(work, base):
    starts = record_offsets(base, 1)
    last = starts[-1]
    rec = PUT_OVERHEAD + len(payload(0))
    for cut in range(last, last + rec):
        for mode in MODES:
            d = clone(work, base)
            mutate(d, 1, lambda b: b[:cut])
            got = open_and_drain(d, mode)
            if mode == "strict" and cut > last:  # cut == last: a clean record boundary
                assert isinstance(got, CorruptJournal)
            else:
                assert got == ALL[:-1], (cut, mode)


def test_zero_fill_from_every_byte_of_the_last_record(work, base):
    last = record_offsets(base, 1)[-1]
    rec = PUT_OVERHEAD + len(payload(0))
    for start in range(last, last + rec):
        for mode in ("point_in_time", "tolerate_tail", "salvage"):
            d = clone(work, base)
            mutate(d, 1, lambda b: b[:start] + bytes(len(b) - start))
            assert open_and_drain(d, mode) == ALL[:-1], (start, mode)


@pytest.mark.parametrize("which,victim", [(1, 2), (0, 2)], ids=["newest-file", "older-file"])
def test_every_bit_of_a_record_header_flipped(work, base, which, victim):
    start = record_offsets(base, which)[victim]
    bad_id = which * 6 + victim + 1
    for bit in range(PUT_OVERHEAD * 8):
        # every bit in the two lenient modes; a sample for the refusing ones (same code path)
        for mode in MODES if bit % 5 == 0 else ("point_in_time", "salvage"):
            d = clone(work, base)

            def flip(b: bytearray) -> bytearray:
                b[start + bit // 8] ^= 1 << (bit % 8)
                return b

            mutate(d, which, flip)
            got = open_and_drain(d, mode)
            if mode in ("strict", "tolerate_tail"):
                assert isinstance(got, CorruptJournal), (bit, mode)
            elif mode == "salvage":
                assert got == [i for i in ALL if i != bad_id], (bit, mode)
            else:  # point_in_time: the file ends at the damage
                lost = range(bad_id, (which + 1) * 6 + 1)
                assert got == [i for i in ALL if i not in lost], (bit, mode)


def test_every_bit_of_the_file_header_flipped_refuses_or_sets_the_file_aside(work, base):
    for which in (0, 1):
        for bit in range(0, 46 * 8, 2):
            d = clone(work, base)

            def flip(b: bytearray) -> bytearray:
                b[bit // 8] ^= 1 << (bit % 8)
                return b

            mutate(d, which, flip)
            assert isinstance(open_and_drain(d, "strict"), JournaledError)
            got = open_and_drain(d, "point_in_time")
            if isinstance(got, UnsupportedVersion):
                assert 8 <= bit // 8 < 10  # the version field: refused by name, never guessed
                continue
            assert isinstance(got, list)
            assert set(got) <= set(ALL)
            assert set(ALL[(1 - which) * 6 : (2 - which) * 6]) <= set(got)  # the other file


@pytest.mark.parametrize("what", ["garbage", "old-record", "zeros"])
def test_appended_bytes_are_a_tail_that_is_cut(work, base, what):
    starts = record_offsets(base, 1)
    rec = PUT_OVERHEAD + len(payload(0))
    for mode in MODES:
        d = clone(work, base)

        def append(b: bytearray) -> bytearray:
            if what == "garbage":
                return b + os.urandom(100)
            if what == "old-record":
                return b + b[starts[1] : starts[1] + rec]  # a valid record, at the wrong place
            return b + bytes(100)

        mutate(d, 1, append)
        got = open_and_drain(d, mode)
        if mode == "strict":
            assert isinstance(got, CorruptJournal)
        else:
            assert got == ALL, (what, mode)


def test_zeroed_hole_in_the_middle(work, base):
    starts = record_offsets(base, 1)
    for mode in MODES:
        d = clone(work, base)

        def hole(b: bytearray) -> bytearray:
            b[starts[2] + 10 : starts[3] + 10] = bytes(starts[3] - starts[2])
            return b

        mutate(d, 1, hole)
        got = open_and_drain(d, mode)
        if mode in ("strict", "tolerate_tail"):
            assert isinstance(got, CorruptJournal)
        elif mode == "salvage":
            assert got == [i for i in ALL if i not in (9, 10)]
        else:
            assert got == ALL[:8]


def test_point_in_time_keeps_the_cut_bytes_and_reports_them(work, base):
    d = clone(work, base)
    starts = record_offsets(base, 1)

    def flip(b: bytearray) -> bytearray:
        b[starts[1] + 20] ^= 0xFF
        return b

    mutate(d, 1, flip)
    f = journal_files(d)[1]
    original = open(f, "rb").read()
    with JournaledQueue(d, QueueConfig(recovery="point_in_time"), name="q") as q:
        (event,) = q.recovery_report
        assert event.action == "cut-at-damage"
        assert event.offset == starts[1]
        assert event.ids_lost == (8, 12)
        assert event.kept is not None and os.path.exists(event.kept)
        assert open(event.kept, "rb").read() == original[starts[1] :]
        new = q.put(b"new")
        assert new == 13  # ids of cut-off records are never reused


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    flips=st.lists(
        st.tuples(st.integers(0, 1), st.integers(0, 10_000), st.integers(0, 7)), min_size=1, max_size=4
    ),
    mode=st.sampled_from(MODES),
)
def test_random_bit_flips_never_deliver_corrupt_data(work, base, flips, mode):
    d = clone(work, base)
    for which, pos, bit in flips:

        def flip(b: bytearray) -> bytearray:
            b[pos % len(b)] ^= 1 << bit
            return b

        mutate(d, which, flip)
    got = open_and_drain(d, mode)  # asserts intact payloads, order, usability
    assert isinstance(got, (list, CorruptJournal))


# ------------------------------------------------------------------------------- checkpoints
COMMITTED = set(range(1, 8))  # reader r committed ids 1..7 before close


def check_reader_r(d: str) -> list[int]:
    got = open_and_drain(d, "point_in_time", reader="r")
    assert isinstance(got, list)
    # damage to a checkpoint may only cause redelivery, never loss
    assert set(ALL) - COMMITTED <= set(got)
    return got


def test_intact_checkpoint_redelivers_nothing(work, base):
    assert check_reader_r(clone(work, base)) == list(range(8, N + 1))


def test_truncated_checkpoint_only_redelivers(work, base):
    size = os.path.getsize(os.path.join(base, "q.read.r"))
    for n in range(size):
        d = clone(work, base)
        ck = os.path.join(d, "q.read.r")
        os.truncate(ck, n)
        check_reader_r(d)


def test_flipped_checkpoint_only_redelivers(work, base):
    size = os.path.getsize(os.path.join(base, "q.read.r"))
    for pos in range(size):
        for bit in (0, 5):
            d = clone(work, base)
            ck = os.path.join(d, "q.read.r")
            b = bytearray(open(ck, "rb").read())
            b[pos] ^= 1 << bit
            open(ck, "wb").write(b)
            check_reader_r(d)


def test_deleted_checkpoint_replays_from_the_start(work, base):
    d = clone(work, base)
    os.unlink(os.path.join(d, "q.read.r"))
    assert check_reader_r(d) == ALL  # the registry still names the reader


def test_older_checkpoint_only_redelivers(work, base):
    d = clone(work, base)
    shutil.copy(os.path.join(work, "old-ckpt"), os.path.join(d, "q.read.r"))
    assert check_reader_r(d) == list(range(4, N + 1))


def test_damaged_registry_keeps_readers_known_by_their_checkpoints(work, base):
    d = clone(work, base)
    with open(os.path.join(d, "q.readers"), "r+b") as f:
        f.write(b"XX")
    check_reader_r(d)
    with JournaledQueue(d, name="q") as q:
        assert {"all", "r"} <= set(q.readers())


def test_interrupted_rotation_is_a_torn_tail_except_in_strict_mode(work, base):
    for mode in MODES:
        d = clone(work, base)
        newest = journal_files(d)[-1]
        ms = int(newest.rsplit(".", 1)[1]) + 1000
        with open(os.path.join(d, f"q.{ms}"), "wb") as f:
            f.write(open(newest, "rb").read()[:20])  # a header cut short by the crash
        got = open_and_drain(d, mode)
        if mode == "strict":
            assert isinstance(got, CorruptJournal)
        else:
            assert got == ALL, mode


def test_recovery_mode_is_validated():
    with pytest.raises(ValueError):
        QueueConfig(recovery="best_effort")
    assert QueueConfig().recovery == "salvage"


@pytest.mark.parametrize("mode", ["point_in_time", "salvage"])
def test_older_file_damage_is_found_lazily_and_reported_once(work, base, mode):
    d = clone(work, base)
    starts = record_offsets(base, 0)

    def flip(b: bytearray) -> bytearray:
        b[starts[3] + 30] ^= 1
        return b

    mutate(d, 0, flip)
    with JournaledQueue(d, QueueConfig(recovery=mode), name="q") as q:
        assert q.recovery_report == []  # opening reads only the newest file
        for name in ("all", "r"):
            r = q.reader(name)
            while True:
                try:
                    r.commit(r.get(block=False))
                except Empty:
                    break
        (event,) = q.recovery_report
        if mode == "point_in_time":
            assert event.action == "cut-at-damage" and event.ids_lost == (4, 6)
            assert event.kept and os.path.exists(event.kept)
        else:  # the default: exactly the damaged record is skipped
            assert event.action == "skipped-damage" and event.ids_lost == (4, 4)


def test_reader_resuming_past_a_damaged_record_loses_no_intact_item(work):
    """Regression: locating a checkpoint head counted records instead of ids, so with a record
    missing between the scan start and the head it overshot and silently dropped the intact
    item at the head."""
    d = os.path.join(work, "resume", "q")
    with JournaledQueue(d, QueueConfig(sync="always"), name="q") as q:
        r = q.reader("r")
        for i in range(1, N + 1):
            q.put(payload(i))
        for _ in range(7):
            r.commit(r.get(block=False))  # head 8
    rec = PUT_OVERHEAD + len(payload(0))

    def flip(b: bytearray) -> bytearray:
        b[len(b) - (N - 5 + 1) * rec + 20] ^= 1  # damage id 5, below the head
        return b

    mutate(d, 0, flip)
    assert open_and_drain(d, "salvage", reader="r") == list(range(8, N + 1))
