"""The sans-IO codec (journaled.format.record) against docs/format.md, its test vector, and fuzzing."""

from __future__ import annotations

import struct
from types import MappingProxyType

import attrs
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journaled.errors import CorruptJournal, UnsupportedVersion
from journaled.format import speedups
from journaled.format.fallback import decode_many, encode_puts
from journaled.format.metadata import (
    MAX_HEADER_BYTES,
    MAX_HEADER_NAME,
    MAX_HEADERS,
    MAX_KEY,
    NO_HEADERS,
    Meta,
    header_bytes,
)
from journaled.format.record import (
    PUT_OVERHEAD,
    RECORD_HEADER_SIZE,
    TYPE_PUT,
    TYPE_PUTX,
    Damage,
    FileHeader,
    Put,
    PutX,
    Skipped,
    decode_header,
    decode_one,
    encode_header,
    encode_put,
    encode_putx,
    encode_record,
    find_next_record,
)
from journaled.format.smallfiles import CheckpointData, ReaderCounts, decode_checkpoint, encode_checkpoint

# The test vector of docs/format.md section 11, pasted from there (not regenerated).
VECTOR_HEADER_HEX = "894a524e4c0d0a1a01002c000403020101000000000000000068e5cf8b01000006006576656e7473704103b3"
VECTOR_RECORD_HEX = "5cd961f31d0000000101000000000000000068e5cf8b010000000000000000000068656c6c6f"
VECTOR_SALT = 0x01020304
VECTOR_MS = 1700000000000

FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reference_crc32c(data: bytes, seed: int) -> int:
    """Bit-by-bit CRC32C continued from ``seed``, exactly as format.md section 5 words it."""
    reg = seed ^ 0xFFFFFFFF
    for byte in data:
        reg ^= byte
        for _ in range(8):
            reg = (reg >> 1) ^ (0x82F63B78 if reg & 1 else 0)
    return reg ^ 0xFFFFFFFF


def encode_stream(salt: int, start: int, items: list[bytes], first_id: int = 1) -> tuple[bytes, list[Put]]:
    """Records for ``items`` laid from file offset ``start``; returns the bytes and what was written."""
    out = bytearray()
    written = []
    for k, payload in enumerate(items):
        off = start + len(out)
        rec = encode_put(salt, off, first_id + k, VECTOR_MS + k, 0, payload)
        written.append(Put(off, len(rec), first_id + k, VECTOR_MS + k, 0, payload))
        out += rec
    return bytes(out), written


def recover_all(buf: bytes, base: int, salt: int) -> list[Put]:
    """Read ``buf`` the way recovery does: decode, and after damage resync with the id check."""
    out: list[Put] = []
    pos = 0
    expected = 0
    while pos < len(buf):
        recs, pos, damage = decode_many(buf, base, salt, pos)
        for rec in recs:
            if isinstance(rec, Put):
                out.append(rec)
                expected = rec.id + 1
        if damage is None:
            break
        nxt = find_next_record(buf, pos + 1, base, salt, expected)
        if nxt is None:
            break
        pos = nxt
    return out


# ----------------------------------------------------------------------------- test vector
def test_vector_encodes_to_the_documented_bytes():
    header = encode_header(FileHeader(salt=VECTOR_SALT, first_id=1, created_ms=VECTOR_MS, name="events"))
    record = encode_put(VECTOR_SALT, len(header), 1, VECTOR_MS, 0, b"hello")
    assert header.hex() == VECTOR_HEADER_HEX
    assert record.hex() == VECTOR_RECORD_HEX


def test_vector_decodes_to_the_documented_values():
    data = bytes.fromhex(VECTOR_HEADER_HEX + VECTOR_RECORD_HEX)
    header = decode_header(data)
    assert header == FileHeader(salt=VECTOR_SALT, first_id=1, created_ms=VECTOR_MS, name="events")
    assert header.size == 44
    recs, end, damage = decode_many(data, 0, header.salt, header.size)
    assert recs == [Put(offset=44, size=38, id=1, add_ms=VECTOR_MS, expire_ms=0, payload=b"hello")]
    assert end == len(data) and damage is None


def test_vector_crcs_follow_the_documented_seed_rule():
    data = bytes.fromhex(VECTOR_HEADER_HEX + VECTOR_RECORD_HEX)
    (header_crc,) = struct.unpack_from("<I", data, 40)
    assert header_crc == reference_crc32c(data[:40], 0) == 0xB3034170
    (record_crc,) = struct.unpack_from("<I", data, 44)
    assert record_crc == reference_crc32c(data[48:], VECTOR_SALT ^ 44) == 0xF361D95C


@given(st.binary(max_size=64), st.integers(0, 2**32 - 1))
@settings(max_examples=50, deadline=None)
def test_crc32c_package_matches_the_documented_definition(data, seed):
    assert crc32c(data, seed) == reference_crc32c(data, seed)


# ----------------------------------------------------------------------------- round trips
@given(
    salt=st.integers(0, 2**32 - 1),
    first_id=st.integers(0, 2**63),
    created_ms=st.integers(0, 2**64 - 1),
    name=st.text("abcXYZ019_.:-", min_size=1, max_size=128),
)
@settings(max_examples=60, deadline=None)
def test_header_round_trips(salt, first_id, created_ms, name):
    header = FileHeader(salt=salt, first_id=first_id, created_ms=created_ms, name=name)
    raw = encode_header(header)
    assert len(raw) == header.size
    assert decode_header(raw + b"trailing record bytes") == header


@given(
    salt=st.integers(0, 2**32 - 1),
    offset=st.integers(0, 2**32 - 1),
    item_id=st.integers(0, 2**64 - 1),
    add_ms=st.integers(0, 2**64 - 1),
    expire_ms=st.integers(0, 2**64 - 1),
    payload=st.binary(max_size=300),
)
@settings(max_examples=100, deadline=None)
def test_put_round_trips_at_its_offset(salt, offset, item_id, add_ms, expire_ms, payload):
    rec = encode_put(salt, offset, item_id, add_ms, expire_ms, payload)
    assert len(rec) == PUT_OVERHEAD + len(payload)
    got = decode_one(rec, 0, offset, salt)
    assert got == Put(offset, len(rec), item_id, add_ms, expire_ms, payload)


@given(st.lists(st.binary(max_size=50), max_size=20), st.integers(0, 2**32 - 1), st.integers(0, 10_000))
@settings(max_examples=60, deadline=None)
def test_batch_encoder_equals_one_by_one(payloads, salt, start):
    out = bytearray(b"prefix")
    offsets = encode_puts(salt, start, 7, VECTOR_MS, 5, payloads, out)
    expected = bytearray()
    for k, p in enumerate(payloads):
        assert offsets[k] == start + len(expected)
        expected += encode_put(salt, start + len(expected), 7 + k, VECTOR_MS, 5, p)
    assert bytes(out) == b"prefix" + bytes(expected)


def test_checkpoint_round_trips():
    ck = CheckpointData(head=10, file_ms=123, file_offset=456, done=(12, 15), errors=((11, 2), (13, 1)))
    raw = encode_checkpoint(ck)
    assert len(raw) == 52 + 8 * 2 + 12 * 2  # an empty counters block: nothing counted yet
    assert decode_checkpoint(raw) == ck
    counted = attrs.evolve(ck, counts=ReaderCounts(3, 9, 8, 7, 6, 5, 4, 3, 2))
    raw = encode_checkpoint(counted)
    assert len(raw) == 52 + 8 * 2 + 12 * 2 + 8 * 9
    assert decode_checkpoint(raw) == counted


def test_every_bit_flip_in_a_counted_checkpoint_is_refused():
    raw = encode_checkpoint(CheckpointData(head=10, counts=ReaderCounts(put_origin=4, committed=6)))
    for i in range(len(raw)):
        bad = bytearray(raw)
        bad[i] ^= 1 << (i % 8)
        with pytest.raises(CorruptJournal):
            decode_checkpoint(bytes(bad))


def test_every_bit_flip_in_a_checkpoint_is_refused():
    raw = encode_checkpoint(CheckpointData(head=10, done=(12,), errors=((11, 2),)))
    for i in range(len(raw)):
        bad = bytearray(raw)
        bad[i] ^= 1 << (i % 8)
        with pytest.raises(CorruptJournal):
            decode_checkpoint(bytes(bad))


# ----------------------------------------------------------------------------- versions and types
def test_unknown_header_version_is_refused_by_name():
    raw = bytearray(encode_header(FileHeader(salt=1, first_id=1, created_ms=0, name="q")))
    raw[8:10] = (2).to_bytes(2, "little")
    with pytest.raises(UnsupportedVersion) as err:
        decode_header(bytes(raw), "q.1")
    assert "version 2" in str(err.value) and err.value.path == "q.1"


def test_unknown_checkpoint_version_is_refused_by_name():
    raw = bytearray(encode_checkpoint(CheckpointData(head=1)))
    raw[8:10] = (9).to_bytes(2, "little")
    with pytest.raises(UnsupportedVersion):
        decode_checkpoint(bytes(raw))


def test_every_bit_flip_in_a_header_is_refused():
    raw = encode_header(FileHeader(salt=0xDEADBEEF, first_id=5, created_ms=VECTOR_MS, name="events"))
    for i in range(len(raw)):
        for bit in range(8):
            bad = bytearray(raw)
            bad[i] ^= 1 << bit
            with pytest.raises(CorruptJournal):
                decode_header(bytes(bad))


def test_skippable_unknown_type_is_skipped_and_reading_continues():
    salt = 99
    a = encode_put(salt, 0, 1, VECTOR_MS, 0, b"a")
    ext = encode_record(salt, len(a), 0x80 | 0x11, b"some future index")
    b = encode_put(salt, len(a) + len(ext), 2, VECTOR_MS, 0, b"b")
    recs, end, damage = decode_many(a + ext + b, 0, salt)
    assert damage is None and end == len(a + ext + b)
    assert [type(r) for r in recs] == [Put, Skipped, Put]
    assert recs[1] == Skipped(len(a), len(ext), 0x91)
    assert [r.payload for r in recs if isinstance(r, Put)] == [b"a", b"b"]


@pytest.mark.parametrize("rtype", [4, 0x33, 0x7F])
def test_valid_record_of_unknown_required_type_raises_unsupported_version(rtype):
    rec = encode_record(7, 100, rtype, b"must understand me")
    with pytest.raises(UnsupportedVersion):
        decode_one(rec, 0, 100, 7)


def test_unknown_type_with_bad_crc_is_damage_not_a_version_error():
    rec = bytearray(encode_record(7, 100, 0x22, b"x"))
    rec[-1] ^= 1
    assert isinstance(decode_one(bytes(rec), 0, 100, 7), Damage)


def test_a_zero_filled_tail_of_a_whole_header_or_more_is_damage():
    rec = encode_put(1, 0, 1, 0, 0, b"x")
    for zeros in (RECORD_HEADER_SIZE, 4096):
        recs, end, damage = decode_many(rec + bytes(zeros), 0, 1)
        assert len(recs) == 1 and end == len(rec)
        assert damage is not None and not damage.incomplete


def test_fewer_zero_bytes_than_a_header_are_incomplete_not_damage():
    # they may be the first bytes of a valid record whose CRC starts with zeros, cut by the end
    # of a read window: "read more" (only the walker, which knows where the file ends, may call
    # them a torn tail)
    rec = encode_put(1, 0, 1, 0, 0, b"x")
    for zeros in (1, 5, RECORD_HEADER_SIZE - 1):
        recs, end, damage = decode_many(rec + bytes(zeros), 0, 1)
        assert len(recs) == 1 and end == len(rec)
        assert damage is not None and damage.incomplete


def test_put_shorter_than_its_fixed_fields_is_damage():
    body = b"\x00" * 10
    hdr = struct.pack("<IB", len(body), TYPE_PUT)
    crc = crc32c(hdr + body, 5)
    got = decode_one(struct.pack("<I", crc) + hdr + body, 0, 0, 5)
    assert isinstance(got, Damage) and "length" in got.reason


def test_torn_record_at_every_length_is_incomplete_or_damage_never_a_record():
    rec = encode_put(3, 50, 1, VECTOR_MS, 0, b"payload!")
    for cut in range(len(rec)):
        got = decode_one(rec[:cut], 0, 50, 3) if cut else Damage(50, "", True)
        assert isinstance(got, Damage)


# ----------------------------------------------------------------------------- position seeding
@given(st.integers(0, 2**32 - 1), st.integers(0, 2**31), st.integers(1, 2**31), st.binary(max_size=40))
@settings(max_examples=100, deadline=None)
def test_a_record_never_validates_at_another_offset_of_its_file(salt, offset, delta, payload):
    rec = encode_put(salt, offset, 1, VECTOR_MS, 0, payload)
    other = (offset + delta) % 2**32
    assert isinstance(decode_one(rec, 0, other, salt), Damage)


def test_a_record_copied_into_another_file_does_not_validate():
    rec = encode_put(0x1111, 44, 1, VECTOR_MS, 0, b"x")
    assert isinstance(decode_one(rec, 0, 44, 0x2222), Damage)


@given(salt=st.integers(0, 2**32 - 1), prefix=st.binary(max_size=30), lead=st.integers(0, 1000))
@settings(max_examples=60, deadline=None)
def test_a_payload_embedding_a_valid_record_is_not_accepted_at_the_embedded_position(salt, prefix, lead):
    start = 44 + lead
    # The embedded record is a perfectly valid record for the *outer* record's position (a copy of
    # a real record, e.g. a journal snippet put into a queue), with a plausible, larger id.
    inner = encode_put(salt, start, 2, VECTOR_MS, 0, b"I am not a real record")
    outer = encode_put(salt, start, 1, VECTOR_MS, 0, prefix + inner)
    follower = encode_put(salt, start + len(outer), 2, VECTOR_MS, 0, b"real")
    buf = outer + follower
    inner_pos = PUT_OVERHEAD + len(prefix)
    # Damage the outer record's header so a resynchronising scan must look inside it.
    damaged = bytearray(buf)
    damaged[0] ^= 0xFF
    found = find_next_record(bytes(damaged), 1, start, salt, min_id=2)
    assert found != inner_pos
    assert found == len(outer)
    assert recover_all(bytes(damaged), start, salt) == [
        Put(start + len(outer), len(follower), 2, VECTOR_MS, 0, b"real")
    ]


def test_forward_scan_rejects_a_valid_record_with_a_stale_id():
    salt = 5
    stale = encode_put(salt, 100, 3, VECTOR_MS, 0, b"old life")
    buf = b"\xff" * 10 + stale
    assert find_next_record(buf, 0, 90, salt, min_id=3) == 10
    assert find_next_record(buf, 0, 90, salt, min_id=4) is None


# ----------------------------------------------------------------------------- fuzzing
@given(buf=st.binary(max_size=400), salt=st.integers(0, 2**32 - 1), base=st.integers(0, 2**31))
@FUZZ
def test_arbitrary_bytes_decode_to_records_or_damage_never_another_exception(buf, salt, base):
    try:
        recs, end, damage = decode_many(buf, base, salt)
    except UnsupportedVersion:
        return  # only for a CRC-valid record of a must-understand type: astronomically rare here
    assert 0 <= end <= len(buf)
    assert (damage is None) == (end == len(buf))
    # Random bytes essentially never pass a CRC: anything "decoded" would be a record not written.
    assert recs == []
    assert find_next_record(buf, 0, base, salt, 0) is None
    assert recover_all(buf, base, salt) == []


@given(buf=st.binary(max_size=200), salt=st.integers(0, 2**32 - 1))
@FUZZ
def test_arbitrary_bytes_as_a_header_raise_only_corrupt_journal(buf, salt):
    for candidate in (buf, encode_header(FileHeader(salt, 1, 0, "q"))[:10] + buf):
        try:
            decode_header(candidate)
        except CorruptJournal:
            pass


corruption = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(0, 7)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.binary(min_size=1, max_size=40)),
    st.tuples(st.just("delete"), st.integers(0, 10**6), st.integers(1, 40)),
    st.tuples(st.just("duplicate"), st.integers(0, 10**6), st.integers(0, 10**6)),
    st.tuples(st.just("zero"), st.integers(0, 10**6), st.integers(1, 64)),
)


def corrupt(buf: bytes, how: tuple) -> bytes:
    kind, at, arg = how
    b = bytearray(buf)
    if not b:
        return bytes(b)
    at %= len(b)
    if kind == "flip":
        b[at] ^= 1 << arg
    elif kind == "truncate":
        del b[at:]
    elif kind == "insert":
        b[at:at] = arg
    elif kind == "delete":
        del b[at : at + arg]
    elif kind == "duplicate":  # copy a slice of valid records elsewhere in the stream
        src = arg % len(b)
        b[at:at] = b[src : src + 80]
    elif kind == "zero":
        b[at : at + arg] = bytes(len(b[at : at + arg]))
    return bytes(b)


@given(
    items=st.lists(st.binary(max_size=60), min_size=1, max_size=12),
    salt=st.integers(0, 2**32 - 1),
    start=st.integers(0, 5000),
    damage=st.lists(corruption, min_size=1, max_size=4),
)
@FUZZ
def test_corrupted_stream_never_yields_a_record_that_was_not_written(items, salt, start, damage):
    buf, written = encode_stream(salt, start, items)
    for how in damage:
        buf = corrupt(buf, how)
    got = recover_all(buf, start, salt)
    # Everything delivered is exactly a record written, at the very offset it was written to,
    # in increasing id order.
    assert set(got) <= set(written)
    assert [r.id for r in got] == sorted({r.id for r in got})


@given(
    items=st.lists(st.binary(max_size=60), min_size=2, max_size=12),
    salt=st.integers(0, 2**32 - 1),
    victim=st.integers(0, 100),
    byte=st.integers(0, 10**6),
    bit=st.integers(0, 7),
)
@FUZZ
def test_one_flipped_bit_loses_exactly_the_record_it_hit(items, salt, victim, byte, bit):
    buf, written = encode_stream(salt, 44, items)
    hit = written[victim % len(written)]
    pos = hit.offset - 44 + byte % hit.size
    bad = bytearray(buf)
    bad[pos] ^= 1 << bit
    got = recover_all(bytes(bad), 44, salt)
    assert got == [r for r in written if r != hit]


def naive_find_next_record(buf: bytes, pos: int, base: int, salt: int, min_id: int) -> int | None:
    """find_next_record as format.md words it: try every offset."""
    while pos + PUT_OVERHEAD <= len(buf):
        try:
            rec = decode_one(buf, pos, base, salt)
        except UnsupportedVersion:
            rec = None
        if isinstance(rec, Put) and rec.id >= min_id:
            return pos
        pos += 1
    return None


@given(
    items=st.lists(st.binary(max_size=40), min_size=1, max_size=8),
    salt=st.integers(0, 2**32 - 1),
    damage=st.lists(corruption, max_size=3),
    start=st.integers(0, 100),
    min_id=st.integers(0, 9),
)
@settings(max_examples=50, deadline=None)
def test_forward_scan_finds_exactly_what_trying_every_offset_finds(items, salt, damage, start, min_id):
    buf, _ = encode_stream(salt, 0, items)
    for how in damage:
        buf = corrupt(buf, how)
    buf = bytes(start) + buf  # a zero-filled stretch before it
    for pos in range(0, len(buf), 7):
        assert find_next_record(buf, pos, -start, salt, min_id) == naive_find_next_record(
            buf, pos, -start, salt, min_id
        )


def test_forward_scan_over_megabytes_of_zeros_finds_the_record_after_them():
    salt = 77
    zeros = 8 << 20
    rec = encode_put(salt, zeros, 5, VECTOR_MS, 0, b"x")
    assert find_next_record(bytes(zeros) + rec, 0, 0, salt, 5) == zeros


@given(
    kinds=st.lists(
        st.tuples(st.sampled_from([TYPE_PUT, 0x85, 0xFF, 0x03, 0x7F]), st.binary(max_size=30)),
        min_size=1,
        max_size=10,
    ),
    salt=st.integers(0, 2**32 - 1),
    damage=st.lists(corruption, max_size=3),
)
@FUZZ
def test_mixed_record_types_decode_to_written_records_or_refuse_only_a_written_required_type(
    kinds, salt, damage
):
    buf = bytearray()
    written: dict[int, tuple[int, bytes]] = {}  # offset -> (type, encoded record)
    next_id = 1
    for rtype, body in kinds:
        off = len(buf)
        if rtype == TYPE_PUT:
            rec = encode_put(salt, off, next_id, VECTOR_MS, 0, body)
            next_id += 1
        else:
            rec = encode_record(salt, off, rtype, body)
        written[off] = (rtype, rec)
        buf += rec
    data = bytes(buf)
    for how in damage:
        data = corrupt(data, how)
    pos = 0
    while pos < len(data):
        try:
            recs, pos, dmg = decode_many(data, 0, salt, pos)
        except UnsupportedVersion as exc:
            rtype, rec = written[exc.offset]  # only ever a record really written there...
            assert 2 <= rtype < 0x80  # ...of a type that must be understood
            assert data[exc.offset : exc.offset + len(rec)] == rec
            return
        for r in recs:
            rtype, rec = written[r.offset]
            assert data[r.offset : r.offset + r.size] == rec
            assert (rtype == TYPE_PUT) == isinstance(r, Put)
        if dmg is None:
            break
        nxt = find_next_record(data, pos + 1, 0, salt, 0)
        if nxt is None:
            break
        pos = nxt


def test_crc_text_files_round_trip_and_reject_any_flipped_byte():
    from journaled.format.smallfiles import decode_crc_text, encode_crc_text

    raw = encode_crc_text("journaled-readers 1", ["alpha", "beta"])
    assert decode_crc_text(raw, "journaled-readers 1") == ["alpha", "beta"]
    assert decode_crc_text(raw, "journaled-bookmark 1") is None  # another kind of file
    for k in range(len(raw) - 1):  # the final newline only ends the CRC line
        bad = raw[:k] + bytes([raw[k] ^ 0x01]) + raw[k + 1 :]
        assert decode_crc_text(bad, "journaled-readers 1") is None
    assert decode_crc_text(raw[:-3], "journaled-readers 1") is None
    assert decode_crc_text(b"\xff\xfe garbage", "journaled-readers 1") is None


# ----------------------------------------------------------------------------- PUTX (section 4.4)
# The second test vector of docs/format.md section 11.2, pasted from there (not regenerated).
VECTOR_PUTX_HEX = (
    "4caec7f6570000000201000000000000000068e5cf8b01000000000000000000006052e6cf8b010000000000"
    "0000000000000000000000000008000200120000006f726465722d3432020400000063746a736f6e01010000"
    "00763268656c6c6f"
)


def _names() -> st.SearchStrategy[str]:
    return st.text(min_size=1, max_size=80).filter(lambda n: 1 <= len(n.encode("utf-8")) <= MAX_HEADER_NAME)


def metas() -> st.SearchStrategy[Meta]:
    """Any metadata a put accepts (within format/metadata.py's limits), kept small for speed."""
    headers = st.dictionaries(_names(), st.binary(max_size=100), max_size=8).map(
        lambda d: MappingProxyType(d) if d else NO_HEADERS
    )
    return st.builds(
        Meta,
        not_before_ms=st.integers(0, 2**64 - 1),
        producer=st.integers(0, 2**64 - 1),
        sequence=st.integers(0, 2**64 - 1),
        key=st.none() | st.binary(min_size=1, max_size=MAX_KEY),
        headers=headers,
    )


def test_the_putx_vector_decodes_to_its_metadata_and_encodes_to_its_bytes():
    raw = bytes.fromhex(VECTOR_PUTX_HEX)
    meta = Meta(not_before_ms=VECTOR_MS + 60_000, key=b"order-42", headers={"ct": b"json", "v": b"2"})
    assert encode_putx(VECTOR_SALT, 44, 1, VECTOR_MS, 0, meta, b"hello") == raw
    got = decode_one(raw, 0, 44, VECTOR_SALT)
    assert got == PutX(44, 96, 1, VECTOR_MS, 0, b"hello", meta)
    assert isinstance(got, PutX) and list(got.meta.headers) == ["ct", "v"]
    assert raw[8] == TYPE_PUTX
    (record_crc,) = struct.unpack_from("<I", raw, 0)
    assert record_crc == reference_crc32c(raw[4:], VECTOR_SALT ^ 44) == 0xF6C7AE4C


@given(
    salt=st.integers(0, 2**32 - 1),
    offset=st.integers(0, 2**32 - 1),
    item_id=st.integers(0, 2**64 - 1),
    add_ms=st.integers(0, 2**64 - 1),
    expire_ms=st.integers(0, 2**64 - 1),
    meta=metas(),
    payload=st.binary(max_size=300),
)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_putx_round_trips_at_its_offset(salt, offset, item_id, add_ms, expire_ms, meta, payload):
    rec = encode_putx(salt, offset, item_id, add_ms, expire_ms, meta, payload)
    headers = sum(5 + len(k.encode("utf-8")) + len(v) for k, v in meta.headers.items())
    assert len(rec) == 65 + len(meta.key or b"") + headers + len(payload)
    got = decode_one(rec, 0, offset, salt)
    assert got == PutX(offset, len(rec), item_id, add_ms, expire_ms, payload, meta)
    assert isinstance(got, PutX) and list(got.meta.headers.items()) == list(meta.headers.items())
    # the batch decoders (Python and, when built, compiled) hand back the same record
    for decode in (decode_many, speedups.decode_many):
        records, end, damage = decode(rec + rec, offset, salt)
        assert records[0] == got and end == len(rec) and damage is not None


def test_putx_at_the_limits_round_trips():
    meta = Meta(
        not_before_ms=2**64 - 1,
        producer=2**64 - 1,
        sequence=2**64 - 1,
        key=bytes(range(256)) * 4,
        # 64 names of 255 bytes and values filling the block to exactly 64 KiB
        headers={f"{i:02d}" + "\u00e9" * 126 + "x": bytes([i]) * 764 for i in range(MAX_HEADERS)},
    )
    assert len(meta.key or b"") == MAX_KEY and len(meta.headers) == MAX_HEADERS
    assert header_bytes(meta.headers) == MAX_HEADER_BYTES
    rec = encode_putx(1, 2, 3, 4, 5, meta, b"p")
    got = decode_one(rec, 0, 2, 1)
    assert isinstance(got, PutX) and got.meta == meta


@given(meta=metas(), payload=st.binary(max_size=64), data=st.data())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_bit_flip_anywhere_in_a_putx_never_delivers(meta, payload, data):
    rec = bytearray(encode_putx(VECTOR_SALT, 44, 9, VECTOR_MS, 0, meta, payload))
    bit = data.draw(st.integers(0, 8 * len(rec) - 1))
    rec[bit // 8] ^= 1 << (bit % 8)
    got = decode_one(bytes(rec), 0, 44, VECTOR_SALT)
    assert isinstance(got, Damage), got
    assert find_next_record(bytes(rec), 0, 44, VECTOR_SALT, 0) is None


def test_find_next_record_resumes_at_a_putx():
    meta = Meta(key=b"k", headers={"a": b"1"})
    head = encode_put(VECTOR_SALT, 0, 1, VECTOR_MS, 0, b"x")
    garbage = bytes([TYPE_PUTX]) * 40
    rec = encode_putx(VECTOR_SALT, len(head) + len(garbage), 2, VECTOR_MS, 0, meta, b"y")
    buf = head + garbage + rec
    assert find_next_record(buf, 1, 0, VECTOR_SALT, 2) == len(head) + len(garbage)
    assert find_next_record(buf, 1, 0, VECTOR_SALT, 3) is None  # its id is below the one expected
