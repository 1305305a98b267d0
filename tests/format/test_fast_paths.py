"""The performance fast paths build exactly what the plain code builds.

Each fast path (single put, batch encode, inline decode, slot-built Items and Puts) is checked
against the straightforward construction it replaces; no timing is asserted.
"""

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from journaled import JournaledQueue, QueueConfig
from journaled.format.fallback import decode_many, encode_puts
from journaled.format.record import Put, decode_one, encode_put
from journaled.item import Item, new_item, new_items

payloads = st.lists(st.binary(max_size=300), min_size=1, max_size=20)


def test_new_item_equals_item_built_by_attrs():
    fast = new_item(7, b"abc", 1.5, 9.0, 2)
    assert fast == Item(7, b"abc", 1.5, 9.0, 2)
    assert hash(fast) == hash(Item(7, b"abc", 1.5, 9.0, 2))
    assert type(fast) is Item and repr(fast) == repr(Item(7, b"abc", 1.5, 9.0, 2))


def test_new_items_numbers_consecutive_ids_with_no_errors():
    assert new_items(10, [b"a", b"b"], 2.0, None) == [Item(10, b"a", 2.0), Item(11, b"b", 2.0)]


@settings(max_examples=40, deadline=None)
@given(payloads, st.integers(0, 2**32 - 1), st.integers(0, 2**31), st.integers(1, 2**40))
def test_encode_puts_is_byte_identical_to_encode_put(items, salt, offset, first_id):
    out = bytearray()
    offsets = encode_puts(salt, offset, first_id, 1234, 99, items, out)
    expected = b""
    for k, payload in enumerate(items):
        assert offsets[k] == offset + len(expected)
        expected += encode_put(salt, offset + len(expected), first_id + k, 1234, 99, payload)
    assert bytes(out) == expected


@settings(max_examples=40, deadline=None)
@given(payloads, st.integers(0, 2**32 - 1), st.sampled_from(["bytes", "bytearray", "memoryview"]))
def test_inline_decode_matches_decode_one_record_by_record(items, salt, kind):
    out = bytearray()
    encode_puts(salt, 100, 1, 5, 0, items, out)
    buf = {"bytes": bytes(out), "bytearray": out, "memoryview": memoryview(bytes(out))}[kind]
    recs, end, damage = decode_many(buf, 100, salt)
    assert damage is None and end == len(out)
    pos = 0
    for rec in recs:
        assert rec == decode_one(bytes(out), pos, 100, salt)
        assert isinstance(rec, Put) and type(rec.payload) is bytes
        pos += rec.size
    assert [r.payload for r in recs] == items


def test_inline_decode_still_stops_at_a_flipped_byte():
    out = bytearray()
    encode_puts(5, 0, 1, 5, 0, [b"one", b"two", b"three"], out)
    out[len(out) - 2] ^= 0xFF  # inside the last payload
    recs, end, damage = decode_many(bytes(out), 0, 5)
    assert [r.payload for r in recs] == [b"one", b"two"]
    assert damage is not None and damage.reason == "record CRC mismatch" and end == damage.offset


def test_single_put_fast_path_writes_what_put_many_writes(tmp_path):
    data = [os.urandom(n) for n in (0, 1, 100, 5000)]
    for name, how in (("one", "put"), ("many", "put_many")):
        with JournaledQueue(tmp_path / name, QueueConfig(sync="never", journal_size=4096)) as q:
            r = q.reader("r")
            for d in data:
                if how == "put":
                    q.put(d)
                else:
                    q.put_many([d])
            q.put(bytearray(b"not bytes"))  # the general path
    for name in ("one", "many"):
        with JournaledQueue(tmp_path / name, QueueConfig(sync="never", journal_size=4096)) as q:
            r = q.reader("r")
            got = [r.get(block=False) for _ in range(len(data) + 1)]
            assert [g.data for g in got] == [*data, b"not bytes"]
            assert [g.id for g in got] == list(range(1, len(data) + 2))
