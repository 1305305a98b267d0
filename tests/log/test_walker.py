"""The one record walker (journaled/log/walker.py), and every reader of journal bytes agreeing on it.

The unit tests build a file image in memory with format/record.py; the agreement test damages a real
queue directory and asks each user of the walker (the owner's read path, recovery's scan, the
read-only scanner, the Spark segment reader) which records it sees.
"""

from __future__ import annotations

import os
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journaled
from journaled.config import QueueConfig
from journaled.format.record import FileHeader, decode_header, encode_header, encode_put
from journaled.log import recoveryplan
from journaled.log.walker import FileWalker, Span
from journaled.offline.scan import JournalScanner
from journaled.offline.segments import QueueView, read_segment

SALT = 0x5EED


def image(payloads: list[bytes], first_id: int = 1) -> tuple[bytearray, FileHeader, list[int]]:
    """A journal file image holding ``payloads``; returns it, its header and record offsets."""
    header = FileHeader(salt=SALT, first_id=first_id, created_ms=1, name="q")
    data = bytearray(encode_header(header))
    offsets = []
    for k, p in enumerate(payloads):
        offsets.append(len(data))
        data += encode_put(SALT, len(data), first_id + k, 1000 + k, 0, p)
    return data, header, offsets


def walk(data: bytes, header: FileHeader, report=None, **kw) -> tuple[list[int], FileWalker]:
    spans: list[Span] = []

    def keep(span: Span, rest: bytes) -> bool:
        spans.append(span)
        return True

    walker = FileWalker(
        lambda n, off: bytes(data[off : off + n]),
        header.salt,
        header.size,
        len(data),
        header.first_id,
        report or keep,
        **kw,
    )
    ids = [rec.id for batch in walker for rec in batch]
    walker.spans = spans  # type: ignore[attr-defined]
    return ids, walker


def test_a_clean_file_is_walked_to_its_end_in_order():
    data, header, _ = image([b"p%d" % i for i in range(50)])
    ids, walker = walk(data, header, chunk=100)  # many small windows
    assert ids == list(range(1, 51)) and walker.done and walker.pos == len(data)


def test_damage_is_reported_once_and_the_walk_resumes_at_the_next_valid_record():
    data, header, offsets = image([b"x" * 20 for _ in range(10)])
    data[offsets[3] + 12] ^= 0xFF  # inside record 4's body: its CRC fails
    ids, walker = walk(data, header)
    assert ids == [1, 2, 3, 5, 6, 7, 8, 9, 10]
    [span] = walker.spans
    assert (span.offset, span.resume, span.resume_id, span.expected) == (offsets[3], offsets[4], 5, 4)
    assert span.lost_ids() == (4, 4) and not span.torn


def test_a_reporter_that_says_stop_leaves_the_walk_at_the_damage():
    data, header, offsets = image([b"y" * 8 for _ in range(6)])
    data[offsets[2] + 10] ^= 0x01
    ids, walker = walk(data, header, report=lambda span, rest: False)
    assert ids == [1, 2] and walker.done and walker.pos == offsets[2]


def test_an_incomplete_record_at_the_end_is_a_torn_span():
    data, header, offsets = image([b"z" * 30 for _ in range(4)])
    ids, walker = walk(data[: offsets[3] + 15], header)
    assert ids == [1, 2, 3]
    [span] = walker.spans
    assert span.torn and span.incomplete and span.resume is None


def test_a_record_larger_than_the_read_window_is_read_whole():
    data, header, _ = image([b"a", os.urandom(5000), b"b"])
    ids, _ = walk(data, header, chunk=512)
    assert ids == [1, 2, 3]


def test_the_budget_is_never_exceeded_except_by_a_single_first_record():
    data, header, _ = image([b"q" * 100 for _ in range(20)])
    walker = FileWalker(lambda n, off: bytes(data[off : off + n]), SALT, header.size, len(data), 1)
    assert [r.id for r in walker.read_batch(max_bytes=250)] == [1, 2]
    assert [r.id for r in walker.read_batch(max_bytes=50)] == [3]  # one, although it passes 50
    assert walker.read_batch(max_bytes=50, at_least_one=False) == []  # budget full, not done
    assert not walker.done


def test_a_valid_record_with_an_id_below_the_expected_one_is_skipped():
    data, header, _ = image([b"old-1", b"old-2"], first_id=1)
    tail = encode_put(SALT, len(data), 1, 5, 0, b"stale copy of id 1")  # a valid record, old id
    data += tail
    data += encode_put(SALT, len(data), 3, 6, 0, b"three")
    ids, _ = walk(data, header)
    assert ids == [1, 2, 3]


# ----------------------------------------------------------------------------- agreement
def owner_ids(path: str) -> list[int]:
    with journaled.JournaledQueue(path, QueueConfig(recovery="salvage", sync="never")) as q:
        r = q.reader("agreement", journaled.ReaderConfig(start="earliest"))
        out = []
        while True:
            try:
                out.append(r.get(block=False).id)
            except journaled.Empty:
                return out


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), flips=st.integers(1, 4))
def test_every_reader_of_journal_bytes_sees_the_same_records_of_a_damaged_queue(
    tmp_path_factory, seed, flips
):
    path = str(tmp_path_factory.mktemp("agree") / "q")
    rng = random.Random(seed)
    with journaled.JournaledQueue(path, QueueConfig(journal_size=4096, sync="never")) as q:
        q.put_many([rng.randbytes(rng.randint(0, 300)) for _ in range(120)])
    files = sorted(f for f in os.listdir(path) if f.startswith("q.") and f[2:].isdigit())
    for _ in range(flips):  # damage inside older files (the newest keeps an intact tail)
        victim = os.path.join(path, rng.choice(files[:-1]))
        with open(victim, "r+b") as f:
            size = f.seek(0, 2)
            header_len = decode_header(open(victim, "rb").read(512)).size
            f.seek(rng.randrange(header_len, size))
            f.write(bytes([rng.randrange(256)]))
    scanned = [rec.id for rec in JournalScanner(path).records()]
    recovered = []
    for name in files:
        raw = open(os.path.join(path, name), "rb").read()
        recovered += [r[0] for r in recoveryplan.scan_file(raw, decode_header(raw[:512])).records]
    view = QueueView(path)
    spark = [
        rec.id
        for seg in view.plan(view.locate(view.first_id()), view.tail(), 1000)
        for rec in read_segment(seg)
    ]
    owner = owner_ids(path)  # last: salvage never changes an older file
    assert scanned == recovered == spark == owner
