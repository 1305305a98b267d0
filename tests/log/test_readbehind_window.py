"""Read-behind windows: ``Journal.read`` and ``read_window`` bring back exactly the records that fit
their budget, in id order, and the cursor they return continues exactly where they stopped —
within a file, across file boundaries, through the writer's unwritten buffer and past damage."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import scratch_dir
from journaled import JournaledQueue, QueueConfig
from journaled.core.readbehind import ITEM_OVERHEAD, REFILL_BYTES, read_window
from journaled.disk import fileio
from journaled.format.fallback import decode_many
from journaled.format.record import Put, decode_header

SMALL_FILES = QueueConfig(sync="never", journal_size=2048)
EXAMPLES = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def payload(i: int, size: int) -> bytes:
    """Payload of id ``i``, ``size`` bytes (at least 1): its first byte names it."""
    return bytes([i % 251]) * size


def fitting(sizes: list[tuple[int, int]], max_bytes: int, max_items: int) -> list[int]:
    """Ids of the longest prefix of ``sizes`` ((id, payload size) in id order) within
    ``max_items`` and ``max_bytes`` of payload; the first record always fits."""
    out: list[int] = []
    total = 0
    for item_id, n in sizes:
        if len(out) >= max_items or (out and total + n > max_bytes):
            break
        out.append(item_id)
        total += n
    return out


def journal_of(q: JournaledQueue):
    return q.reader("r").core.journal


def journal_files(qdir: str) -> list[str]:
    found = [(int(e.split(".")[1]), e) for e in os.listdir(qdir) if e.startswith("q.") and e[2:].isdigit()]
    return [os.path.join(qdir, e) for _, e in sorted(found)]


class CountingOps(fileio.FileOps):
    """Counts the journal reads."""

    def __init__(self) -> None:
        self.preads = 0

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        self.preads += 1
        return super().pread(fd, size, offset)


def test_a_window_stopped_by_its_byte_budget_reads_its_file_once(monkeypatch):
    with scratch_dir("rbw-") as d, JournaledQueue(os.path.join(d, "q"), QueueConfig(sync="never")) as q:
        journal = journal_of(q)
        q.put_many([payload(i, 300) for i in range(40)])
        q.sync()
        cursor = journal.locate(1)
        ops = CountingOps()
        monkeypatch.setattr(fileio, "ops", ops)
        recs, after = journal.read(cursor, max_bytes=1000)
        assert [r.id for r in recs] == [1, 2, 3]  # the fourth would pass 1,000 bytes
        assert ops.preads == 1
        assert after.next_id == 4
        assert [r.id for r in journal.read(after, max_bytes=1)[0]] == [4]


@EXAMPLES
@given(
    sizes=st.lists(st.integers(1, 700), min_size=1, max_size=60),
    start=st.integers(0, 59),
    budgets=st.lists(st.tuples(st.integers(1, 3000), st.integers(1, 25)), min_size=1, max_size=8),
    written=st.booleans(),
)
def test_windows_are_the_records_that_fit_and_chain_across_files(sizes, start, budgets, written):
    start = min(start, len(sizes) - 1)
    with scratch_dir("rbw-") as d, JournaledQueue(os.path.join(d, "q"), SMALL_FILES) as q:
        journal = journal_of(q)
        for i, n in enumerate(sizes):
            q.put(payload(i + 1, n))
        if written:
            q.sync()  # else the newest records may still be in the writer's buffer
        rest = [(i + 1, n) for i, n in enumerate(sizes)][start:]
        cursor = journal.locate(start + 1)
        k = 0
        while True:
            max_bytes, max_items = budgets[k % len(budgets)]
            k += 1
            recs, cursor = journal.read(cursor, max_bytes=max_bytes, max_items=max_items)
            assert [r.id for r in recs] == fitting(rest, max_bytes, max_items)
            assert all(r.payload == payload(r.id, n) for r, (_, n) in zip(recs, rest, strict=False))
            rest = rest[len(recs) :]
            if not recs:
                break
            assert cursor.next_id == recs[-1].id + 1
        assert rest == []


def damage_one_record(qdir: str) -> int:
    """Flip a payload byte of a record in the middle of the second journal file (not the newest,
    so only a read finds it); return its id."""
    path = journal_files(qdir)[1]
    with open(path, "rb") as f:
        data = bytearray(f.read())
    header = decode_header(bytes(data), path)
    recs = [r for r in decode_many(bytes(data), 0, header.salt, header.size)[0] if isinstance(r, Put)]
    victim = recs[len(recs) // 2]
    data[victim.offset + victim.size - 1] ^= 0xFF
    with open(path, "wb") as f:
        f.write(data)
    return victim.id


@EXAMPLES
@given(room=st.integers(1, 6000), avg=st.integers(0, 400))
def test_read_window_brings_back_what_fits_in_id_order_past_damage(room, avg):
    with scratch_dir("rbw-") as d:
        qdir = os.path.join(d, "q")
        sizes = [(i * 37) % 300 + 1 for i in range(120)]
        with JournaledQueue(qdir, SMALL_FILES) as q:
            q.put_many([payload(i + 1, n) for i, n in enumerate(sizes)])
        assert len(journal_files(qdir)) >= 4
        lost = damage_one_record(qdir)
        with JournaledQueue(qdir, SMALL_FILES) as q:
            journal = journal_of(q)
            want = min(room, REFILL_BYTES)
            got: list[int] = []
            load_id, cursor = 1, None
            while load_id < journal.next_id:
                items, nbytes, expiring, cursor = read_window(journal, load_id, cursor, room, avg, {})
                assert items and not expiring
                assert nbytes == sum(len(it.data) for it in items)
                assert len(items) == 1 or nbytes + len(items) * ITEM_OVERHEAD <= want
                ids = [it.id for it in items]
                assert ids == sorted(ids) and ids[0] >= load_id
                assert all(it.data == payload(it.id, sizes[it.id - 1]) for it in items)
                got += ids
                load_id = max(ids[-1] + 1, cursor.next_id)
            assert got == [i for i in range(1, len(sizes) + 1) if i != lost]


def test_read_window_takes_every_record_that_fits_when_the_size_guess_is_right():
    with scratch_dir("rbw-") as d, JournaledQueue(os.path.join(d, "q"), SMALL_FILES) as q:
        journal = journal_of(q)
        q.put_many([payload(i + 1, 100) for i in range(200)])
        room = 17 * (100 + ITEM_OVERHEAD) + 50
        items, nbytes, _, cursor = read_window(journal, 1, None, room, 100, {})
        assert [it.id for it in items] == list(range(1, 18))
        assert nbytes == 1700 and cursor.next_id == 18
        items, _, _, cursor = read_window(journal, 18, cursor, room, 100, {})
        assert [it.id for it in items] == list(range(18, 35))
