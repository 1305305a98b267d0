"""Compressed units (PUTZ, docs/format.md section 4.5): encoding, decoding, and the record walker
over journals mixing plain and compressed records, damaged units included."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c

from journaled.errors import CompressionUnavailable, UnsupportedVersion
from journaled.format import compressed
from journaled.format.record import (
    MAX_UNIT_RAW,
    TYPE_PUTZ,
    UNIT_FIELDS_STRUCT,
    Damage,
    FileHeader,
    Unit,
    decode_one,
    encode_header,
    encode_record,
    find_next_record,
)
from journaled.format.speedups import encode_puts
from journaled.log import walker as walker_module
from journaled.log.walker import FileWalker, Span

SALT = 0x5EED1234


def json_line(i: int) -> bytes:
    return b'{"ts":"2026-11-28T14:%02d:%02d","level":"info","host":"web-%d","msg":"request done"}' % (
        i // 60 % 60,
        i % 60,
        i % 7,
    )


class Journal:
    """A journal file built record by record: plain runs and compressed units."""

    def __init__(self) -> None:
        self.buf = bytearray(encode_header(FileHeader(salt=SALT, first_id=1, created_ms=1, name="q")))
        self.start = len(self.buf)
        self.next_id = 1
        self.units: list[tuple[int, int, int]] = []  # (offset, first_id, count)

    def plain(self, n: int) -> None:
        encode_puts(
            SALT, len(self.buf), self.next_id, 7, 0, [json_line(self.next_id + k) for k in range(n)], self.buf
        )
        self.next_id += n

    def unit(self, n: int, inner_hook=None) -> int:
        at = len(self.buf)
        inner = bytearray()
        encode_puts(
            compressed.unit_salt(SALT, at), 0, self.next_id, 7, 0,
            [json_line(self.next_id + k) for k in range(n)], inner,
        )  # fmt: skip
        if inner_hook is not None:
            rec = inner_hook(inner, at)
        else:
            rec = compressed.encode_unit(SALT, at, self.next_id, n, inner)
        assert rec is not None
        self.buf += rec
        self.units.append((at, self.next_id, n))
        self.next_id += n
        return at

    def walk(self, **kw) -> tuple[list[int], list[Span]]:
        data = bytes(self.buf)
        spans: list[Span] = []

        def report(span: Span, rest: bytes) -> bool:
            spans.append(span)
            return True

        w = FileWalker(lambda n, off: data[off : off + n], SALT, self.start, len(data), 1, report, **kw)
        return [r.id for batch in w for r in batch], spans


def test_a_unit_round_trips_and_is_smaller_than_its_records() -> None:
    j = Journal()
    at = j.unit(200)
    rec = decode_one(bytes(j.buf), at, 0, SALT)
    assert isinstance(rec, Unit) and (rec.first_id, rec.count, rec.last_id) == (1, 200, 200)
    items = compressed.decode_unit(rec, SALT)
    assert not isinstance(items, str)
    assert [r.id for r in items] == list(range(1, 201))
    assert [r.payload for r in items] == [json_line(i) for i in range(1, 201)]
    assert {r.offset for r in items} == {at}  # an item of a unit stands where the unit stands
    assert rec.size * 4 < rec.raw_len


def test_incompressible_records_are_not_written_as_a_unit() -> None:
    import os

    inner = bytearray()
    encode_puts(compressed.unit_salt(SALT, 40), 0, 1, 7, 0, [os.urandom(4000)], inner)
    assert compressed.encode_unit(SALT, 40, 1, 1, inner) is None


def test_a_journal_mixing_plain_records_and_units_reads_in_id_order() -> None:
    j = Journal()
    j.plain(3)
    j.unit(50)
    j.plain(2)
    j.unit(6)
    j.unit(70)
    j.plain(1)
    for kw in ({}, {"chunk": 64}, {"chunk": 1 << 20}):
        ids, spans = j.walk(**kw)
        assert ids == list(range(1, j.next_id)) and spans == []


@pytest.mark.parametrize("max_items", [1, 7, 49, 50, 51])
def test_a_walk_stopped_inside_a_unit_resumes_at_the_next_id(max_items: int) -> None:
    j = Journal()
    j.plain(2)
    at = j.unit(50)
    j.plain(3)
    data = bytes(j.buf)
    pos, expected, got = j.start, 1, []
    while True:
        w = FileWalker(lambda n, off: data[off : off + n], SALT, pos, len(data), expected)
        batch = w.read_batch(max_items=max_items)
        if not batch:
            break
        got += [r.id for r in batch]
        pos, expected = w.pos, w.expected
        if 2 < expected <= 52 and expected != 3:
            assert pos == at  # a cursor inside the unit keeps the unit's offset
    assert got == list(range(1, 56))


def test_a_walk_by_payload_budget_stops_inside_a_unit() -> None:
    j = Journal()
    j.unit(40)
    data = bytes(j.buf)
    w = FileWalker(lambda n, off: data[off : off + n], SALT, j.start, len(data), 1)
    first = w.read_batch(max_bytes=3 * len(json_line(1)))
    assert [r.id for r in first] == [1, 2, 3] and w.pos == j.start and w.expected == 4
    assert [r.id for r in w.read_batch(max_bytes=1, at_least_one=False)] == []


def flip_in_unit(j: Journal, k: int) -> None:
    at, _, _ = j.units[k]
    j.buf[at + 40] ^= 0xFF  # inside the frame


def test_a_damaged_unit_loses_exactly_its_items_and_the_records_after_it_are_delivered() -> None:
    j = Journal()
    j.plain(3)
    j.unit(30)
    j.unit(20)
    j.plain(2)
    flip_in_unit(j, 0)
    ids, spans = j.walk()
    assert ids == [1, 2, 3] + list(range(34, 56))
    (span,) = spans
    assert span.offset == j.units[0][0] and span.lost_ids() == (4, 33)


def test_a_damaged_unit_before_a_unit_resumes_at_the_unit() -> None:
    j = Journal()
    j.unit(30)
    j.unit(20)
    flip_in_unit(j, 0)
    ids, spans = j.walk()
    assert ids == list(range(31, 51)) and [s.lost_ids() for s in spans] == [(1, 30)]
    assert find_next_record(bytes(j.buf), j.start + 1, 0, SALT, 1) == j.units[1][0]


def test_a_unit_cut_short_at_the_tail_is_a_torn_append() -> None:
    j = Journal()
    j.plain(2)
    at = j.unit(30)
    del j.buf[len(j.buf) - 10 :]
    ids, spans = j.walk()
    assert ids == [1, 2]
    (span,) = spans
    assert span.offset == at and span.torn and span.incomplete


def reframed(
    inner: bytes, at: int, first_id: int, count: int, raw_len: int, frame: bytes | None = None
) -> bytes:
    """A PUTZ with a right CRC over whatever fields and frame it is given."""
    frame = compressed.zstd.compress(inner) if frame is None else frame  # type: ignore[union-attr]
    return encode_record(SALT, at, TYPE_PUTZ, UNIT_FIELDS_STRUCT.pack(first_id, count, 1, raw_len) + frame)


def swap_first_two(inner: bytearray, at: int) -> bytes:
    # re-encode the first two records with their ids swapped: each CRC right, the order wrong
    n = len(inner) // 30
    redo = bytearray()
    encode_puts(compressed.unit_salt(SALT, at), 0, 2, 7, 0, [json_line(2)], redo)
    encode_puts(compressed.unit_salt(SALT, at), len(redo), 1, 7, 0, [json_line(1)], redo)
    size = len(redo)
    return reframed(bytes(redo) + bytes(inner[size:]), at, 1, 30, len(inner)) if n else b""


@pytest.mark.parametrize(
    "case",
    [
        "raw_len_short",
        "raw_len_long",
        "count_more",
        "count_zero",
        "ids_out_of_order",
        "two_frames",
        "garbage",
    ],
)
def test_a_unit_whose_content_disagrees_with_its_fields_is_damage(case: str) -> None:
    hooks = {
        "raw_len_short": lambda inner, at: reframed(inner, at, 1, 30, len(inner) - 1),
        "raw_len_long": lambda inner, at: reframed(inner, at, 1, 30, len(inner) + 1),
        "count_more": lambda inner, at: reframed(inner, at, 1, 31, len(inner)),
        "count_zero": lambda inner, at: reframed(inner, at, 1, 0, len(inner)),
        "ids_out_of_order": swap_first_two,
        "two_frames": lambda inner, at: reframed(
            inner,
            at,
            1,
            30,
            len(inner),
            compressed.zstd.compress(inner) + compressed.zstd.compress(b"x"),  # type: ignore[union-attr]
        ),
        "garbage": lambda inner, at: reframed(inner, at, 1, 30, len(inner), b"\x28\xb5\x2f\xfd" + bytes(40)),
    }
    j = Journal()
    j.plain(2)
    j.unit(30, hooks[case])
    j.plain(2)
    ids, spans = j.walk()
    assert ids == [1, 2, 33, 34]
    assert [s.lost_ids() for s in spans] == [(3, 32)]


def test_a_decompression_bomb_stops_at_raw_len() -> None:
    """A frame that claims 64 KiB but inflates to 1 GiB costs at most raw_len + 1 bytes."""
    z = compressed.zstd
    assert z is not None
    bomb = z.compress(bytes(1 << 30), level=1)
    unit = Unit(100, 26 + len(bomb), 1, 10, 1, 1 << 16, bomb)
    assert compressed.inflate(unit) == "compressed unit decompresses to other than its 65536 bytes"
    huge = encode_record(SALT, 100, TYPE_PUTZ, UNIT_FIELDS_STRUCT.pack(1, 10, 1, MAX_UNIT_RAW + 1) + bomb)
    assert isinstance(decode_one(huge, 0, 100, SALT), Damage)


def test_an_unknown_codec_is_refused_by_name() -> None:
    rec = encode_record(SALT, 0, TYPE_PUTZ, UNIT_FIELDS_STRUCT.pack(1, 1, 9, 40) + b"frame")
    with pytest.raises(UnsupportedVersion, match="codec 9"):
        decode_one(rec, 0, 0, SALT)


def test_without_the_binding_a_unit_stops_the_walk_by_name_after_the_records_before_it(monkeypatch) -> None:
    j = Journal()
    j.plain(3)
    at = j.unit(10)
    j.plain(1)
    monkeypatch.setattr(compressed, "zstd", None)
    monkeypatch.setattr(walker_module, "_UNITS", {})
    data = bytes(j.buf)
    w = FileWalker(
        lambda n, off: data[off : off + n], SALT, j.start, len(data), 1, lambda s, r: pytest.fail(str(s))
    )
    assert [r.id for r in w.read_batch()] == [1, 2, 3]
    for _ in range(2):  # every time, never skipped
        with pytest.raises(CompressionUnavailable, match=r"journaled\[zstd\]") as exc:
            w.read_batch()
        assert exc.value.offset == at and isinstance(exc.value, UnsupportedVersion)
    with pytest.raises(CompressionUnavailable):
        compressed.encode_unit(SALT, 0, 1, 1, b"x" * 40)


def test_the_outer_crc_is_checked_before_decompressing() -> None:
    j = Journal()
    at = j.unit(5)
    raw = bytearray(j.buf)
    raw[at + 10] ^= 1  # first_id, under the outer CRC
    got = decode_one(bytes(raw), at, 0, SALT)
    assert isinstance(got, Damage) and got.reason == "record CRC mismatch"
    assert crc32c(b"") == 0  # the package in use is the one the spec names
    assert struct.calcsize("<QIBI") == 17
