"""PUTX records with a key, headers or a not-before take the compiled fast paths, and the compiled
decoder refuses their damaged metadata exactly as the reference does.

``decode_many`` and ``walk_puts`` decode such a record in C into the reference's ``PutX`` and
``Meta``; ``items_from_puts`` builds its ``MetaItem`` without running the reference's loop; the
columnar walk (``decode_columns``, given the metadata columns) makes it a row.  Metadata whose
lengths are inconsistent, whose header names are empty, not UTF-8 or repeated -- under a CRC that
verifies -- is damage: the compiled twins hand such a record to the reference, which describes it,
so both return the same ``Damage``.  Hypothesis builds such records byte by byte (lengths that lie,
names of any bytes, bodies cut short) and compares the twins on them.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journaled import item
from journaled.format import columns, fallback, metadata, record, speedups
from journaled.format.metadata import NO_HEADERS, Meta
from journaled.format.record import MAX_BODY, Damage, PutX

try:
    from journaled.format import _speedups as native
except ImportError:  # not built: nothing compiled to compare
    native = None  # type: ignore[assignment]
else:  # configured even when JOURNALED_PURE_PYTHON=1 left it unconfigured (idempotent)
    assert speedups.adopt(native) is None

pytestmark = pytest.mark.skipif(native is None, reason="the compiled extension is not built")

SALT = 0x5EED
ADD_MS = 1_700_000_000_123
BIG = 1 << 30
ref_new_item, ref_new_items, ref_items_from_puts = fallback.item_references(item.Item, item.MetaItem)


def outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the exception itself is what is compared
        return "raised", (type(exc), str(exc))


def configure_items(**refs: Any) -> None:
    """The compiled item twins configured as journaled.item does, with ``refs`` replacing some."""
    args = {
        "item_type": item.Item,
        "item_fields": fallback.ITEM_FIELDS,
        "new_item": ref_new_item,
        "new_items": ref_new_items,
        "items_from_puts": ref_items_from_puts,
        "meta_item": item.MetaItem,
    }
    native.configure_items(**{**args, **refs})


def putx_body(
    item_id: int,
    not_before: int,
    key: bytes,
    headers: list[tuple[bytes, bytes]],
    payload: bytes,
    lie: dict[str, int] | None = None,
) -> bytes:
    """A PUTX body built byte by byte: header names are any bytes, and ``lie`` replaces the
    stored ``key_len``, ``count``, ``block_len``, or a header's ``name_len``/``value_len``
    (``name_len_<i>``), with the value given."""
    lie = lie or {}
    block = bytearray()
    for i, (name, value) in enumerate(headers):
        nlen = lie.get(f"name_len_{i}", len(name))
        vlen = lie.get(f"value_len_{i}", len(value))
        block += struct.pack("<BI", nlen & 0xFF, vlen) + name + value
    fixed = metadata.META_FIXED.pack(
        not_before,
        7,
        3,
        lie.get("key_len", len(key)),
        lie.get("count", len(headers)),
        lie.get("block_len", len(block)),
    )
    return record.PUT_FIELDS_STRUCT.pack(item_id, ADD_MS, 0) + fixed + key + bytes(block) + payload


def journal(bodies: list[bytes | None], base: int = 0, first_id: int = 1) -> bytes:
    """Records at file offset ``base``: a PUT for each None, else a PUTX of that body (its CRC
    valid whatever the body says)."""
    out = bytearray()
    for i, body in enumerate(bodies):
        offset = base + len(out)
        if body is None:
            out += record.encode_put(SALT, offset, first_id + i, ADD_MS, 0, b"plain-%d" % i)
        else:
            out += record.encode_record(SALT, offset, record.TYPE_PUTX, body)
    return bytes(out)


def spy(calls: dict[str, int], name: str, fn: Any) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return fn(*args, **kwargs)

    return call


# ------------------------------------------------------------------------------- the fast paths


def test_putx_records_with_metadata_are_decoded_and_walked_without_the_reference():
    metas = [
        Meta(0, 0, 0, b"key", NO_HEADERS),
        Meta(0, 0, 0, None, {"content-type": b"json", "é": b""}),
        Meta(ADD_MS + 5000, 0, 0, None, NO_HEADERS),
        Meta(ADD_MS + 1, 9, 4, b"k" * 1024, {f"h{i}": b"v" * i for i in range(64)}),
    ]
    bodies: list[bytes | None] = [None]
    for i, m in enumerate(metas):
        bodies.append(record.PUT_FIELDS_STRUCT.pack(2 + i, ADD_MS, 0) + metadata.encode(m) + b"payload")
    buf = journal(bodies, base=100)
    calls = {"decode_one": 0, "decode_many": 0, "walk_puts": 0}
    args = speedups.configure_arguments()
    for name in calls:
        args[name] = spy(calls, name, args[name])
    native.configure(**args)
    try:
        got_many = native.decode_many(buf, 100, SALT)
        got_walk = native.walk_puts(buf, 100, SALT, 0, 1, BIG, BIG, 0, True)
    finally:
        assert speedups.adopt(native) is None
    assert calls == {"decode_one": 0, "decode_many": 0, "walk_puts": 0}
    assert got_many == fallback.decode_many(buf, 100, SALT)
    assert got_walk == fallback.walk_puts(buf, 100, SALT, 0, 1, BIG, BIG, 0, True)
    assert [r.meta for r in got_many[0][1:]] == metas
    assert [type(r.meta.headers) for r in got_many[0][1:]] == [type(NO_HEADERS)] * 4


def test_items_of_putx_records_with_metadata_are_built_without_the_references_loop():
    m = Meta(ADD_MS + 9, 0, 0, b"k", {"h": b"v"})
    buf = journal([None, record.PUT_FIELDS_STRUCT.pack(2, ADD_MS, 0) + metadata.encode(m) + b"x", None])
    recs = fallback.decode_many(buf, 0, SALT)[0]
    calls = {"items_from_puts": 0}
    configure_items(items_from_puts=spy(calls, "items_from_puts", ref_items_from_puts))
    try:
        got = native.items_from_puts(recs, {2: 4}, BIG, 5)
    finally:
        configure_items()
    assert calls == {"items_from_puts": 0}
    want = ref_items_from_puts(recs, {2: 4}, BIG, 5)
    assert [type(i) for i in got[0]] == [item.Item, item.MetaItem, item.Item]
    assert got == want and got[0][1].meta is recs[1].meta and got[0][1].error_count == 4


def test_without_meta_item_the_items_of_putx_records_with_metadata_are_the_references():
    m = Meta(0, 0, 0, b"k", NO_HEADERS)
    recs = fallback.decode_many(
        journal([record.PUT_FIELDS_STRUCT.pack(1, ADD_MS, 0) + metadata.encode(m) + b"x"]), 0, SALT
    )[0]
    calls = {"items_from_puts": 0}
    configure_items(items_from_puts=spy(calls, "items_from_puts", ref_items_from_puts), meta_item=None)
    try:
        got = native.items_from_puts(recs, {}, BIG, 0)
    finally:
        configure_items()
    assert calls == {"items_from_puts": 1} and type(got[0][0]) is item.MetaItem


def test_headers_shared_by_consecutive_records_are_one_read_only_mapping_equal_to_the_references():
    m = Meta(0, 0, 0, None, {"ct": b"json"})
    bodies: list[bytes | None] = [
        record.PUT_FIELDS_STRUCT.pack(i, ADD_MS, 0) + metadata.encode(m) + b"x" for i in range(1, 4)
    ]
    recs = native.decode_many(journal(bodies), 0, SALT)[0]
    assert recs == fallback.decode_many(journal(bodies), 0, SALT)[0]
    assert recs[0].meta.headers is recs[2].meta.headers
    with pytest.raises(TypeError):
        recs[0].meta.headers["ct"] = b"changed"  # type: ignore[index]


@pytest.mark.parametrize(
    "headers, lie, reason",
    [
        ([(b"a", b"1")], {"key_len": 60000}, "PUTX metadata runs past its record"),
        ([(b"a", b"1")], {"count": 2}, "PUTX header block is shorter than its count"),
        ([(b"a", b"1")], {"count": 0}, "PUTX header block is longer than its headers"),
        ([(b"a", b"1")], {"value_len_0": 9}, "PUTX header runs past its block"),
        ([(b"", b"1")], {}, "PUTX header runs past its block"),
        ([(b"\xff", b"1")], {}, "PUTX header name is not UTF-8"),
        ([(b"\xed\xa0\x80", b"1")], {}, "PUTX header name is not UTF-8"),  # a surrogate
        ([(b"\xc0\x80", b"1")], {}, "PUTX header name is not UTF-8"),  # overlong
        ([(b"\xf4\x90\x80\x80", b"1")], {}, "PUTX header name is not UTF-8"),  # past U+10FFFF
        ([(b"a", b"1"), (b"a", b"2")], {}, "PUTX header name repeated"),
    ],
)
def test_damaged_metadata_under_a_good_crc_is_the_references_damage(headers, lie, reason):
    buf = journal([None, putx_body(2, 0, b"k", headers, b"pay", lie), None])
    at = len(journal([None]))
    for kind in (bytes, bytearray, memoryview):
        got = native.decode_many(kind(buf), 0, SALT)
        assert got == fallback.decode_many(kind(buf), 0, SALT)
        assert len(got[0]) == 1 and got[2] == Damage(at, reason, False)
    walk = (buf, 0, SALT, 0, 1, BIG, BIG, 0, True)
    assert native.walk_puts(*walk) == fallback.walk_puts(*walk)
    for meta in (False, True):
        outs = [columns.new_columns(meta) for _ in range(2)]
        args = (buf, 0, SALT, 0, 0, 2**62, 2**62, 100, BIG)
        assert (
            native.decode_columns(*args, outs[0])
            == fallback.decode_columns(*args, outs[1])
            == (
                at,
                1,
                columns.MORE,
            )
        )
        assert outs[0] == outs[1]


def test_a_putx_with_more_headers_than_a_put_writes_is_left_to_the_reference_and_read_alike():
    headers = [(b"h%d" % i, b"") for i in range(metadata.MAX_HEADERS + 1)]
    buf = journal([None, putx_body(2, 0, b"", headers, b"pay"), None])
    got = native.decode_many(buf, 0, SALT)
    assert got == fallback.decode_many(buf, 0, SALT) and len(got[0][1].meta.headers) == 65
    outs = [columns.new_columns(True) for _ in range(2)]
    args = (buf, 0, SALT, 0, 0, 2**62, 2**62, 100, BIG)
    assert native.decode_columns(*args, outs[0]) == fallback.decode_columns(*args, outs[1])
    assert outs[0] == outs[1] and len(outs[0][0]) == 8  # the walk stopped at it


# ------------------------------------------------------------------------ twins equal, by hypothesis

names = st.one_of(
    st.text(min_size=1, max_size=4).map(lambda t: t.encode("utf-8")),
    st.binary(min_size=0, max_size=4),  # empty or not UTF-8, often
    st.sampled_from([b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80", b"\xe0\x80\x80", b"\xf0\x9f\x98"]),
)
lies = st.dictionaries(
    st.sampled_from(
        ["key_len", "count", "block_len", "name_len_0", "value_len_0", "name_len_1", "value_len_1"]
    ),
    st.integers(0, 255) | st.sampled_from([0, 1, 65535]),
    max_size=2,
)


@st.composite
def garbled_putx(draw: Any, item_id: int) -> bytes:
    key = draw(st.sampled_from([b"", b"k", b"key-" * 4]))
    headers = draw(st.lists(st.tuples(names, st.binary(max_size=5)), max_size=4))
    body = putx_body(
        item_id,
        draw(st.sampled_from([0, ADD_MS + 1])),
        key,
        headers,
        draw(st.binary(max_size=12)),
        draw(st.none() | lies),
    )
    cut = draw(st.integers(0, 12))  # the body ends early (its CRC still verifies)
    if cut and len(body) - cut >= record.PUTX_FIELDS_SIZE:
        body = body[:-cut]
    return body


@st.composite
def garbled_journals(draw: Any) -> tuple[bytes, int]:
    base = draw(st.integers(0, 2**33))
    n = draw(st.integers(0, 6))
    bodies = [draw(st.none() | garbled_putx(i + 1)) for i in range(n)]
    buf = bytearray(journal(bodies, base))
    if draw(st.booleans()) and buf:  # and a byte flipped somewhere: a CRC that fails
        at = draw(st.integers(0, len(buf) - 1))
        buf[at] ^= 1 << draw(st.integers(0, 7))
    if draw(st.booleans()):  # or the journal cut short
        del buf[draw(st.integers(0, len(buf))) :]
    return bytes(buf), base


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(garbled_journals(), st.integers(0, 40), st.none() | st.integers(0, 6))
def test_decode_many_agrees_on_garbled_metadata(case, pos, limit):
    buf, base = case
    for kind in (bytes, bytearray, memoryview):
        got = outcome(native.decode_many, kind(buf), base, SALT, pos, MAX_BODY, limit=limit)
        assert got == outcome(fallback.decode_many, kind(buf), base, SALT, pos, MAX_BODY, limit=limit)
        if got[0] == "ok":
            for r in got[1][0]:
                if type(r) is PutX:
                    assert type(r.meta) is Meta and type(r.meta.headers) is type(NO_HEADERS)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(garbled_journals(), st.integers(0, 40), st.integers(0, 8), st.integers(0, 200), st.booleans())
def test_walk_puts_agrees_on_garbled_metadata(case, pos, max_items, max_bytes, first_free):
    buf, base = case
    for kind in (bytes, bytearray):
        args = (kind(buf), base, SALT, pos, 0, max_items, max_bytes, 0, first_free)
        assert outcome(native.walk_puts, *args) == outcome(fallback.walk_puts, *args)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    garbled_journals(),
    st.integers(0, 40),
    st.integers(0, 4),
    st.integers(0, 8),
    st.integers(0, 300),
    st.booleans(),
    st.lists(st.binary(max_size=12), min_size=13, max_size=13),
)
def test_decode_columns_agrees_on_garbled_metadata(case, pos, lo, max_rows, max_bytes, meta, prefill):
    """The same return value and the same bytes appended, to fresh columns and to columns that
    hold some already (of any lengths: the metadata's offsets continue from them)."""
    buf, base = case
    args = (buf, base, SALT, pos, lo, 2**62, 2**62, max_rows, max_bytes)
    for start in (columns.new_columns(meta), [bytearray(c) for c in prefill[: 13 if meta else 5]]):
        outs = [[bytearray(c) for c in start] for _ in range(2)]
        assert outcome(native.decode_columns, *args, outs[0]) == outcome(
            fallback.decode_columns, *args, outs[1]
        )
        assert outs[0] == outs[1]


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(garbled_journals(), st.integers(0, 400), st.integers(0, 40))
def test_items_from_puts_agrees_on_records_with_metadata(case, want, overhead):
    buf, base = case
    recs = fallback.decode_many(buf, base, SALT)[0]
    errors = {r.id: 1 for r in recs[::2]}
    configure_items()
    got, ref = (
        native.items_from_puts(recs, errors, want, overhead),
        ref_items_from_puts(recs, errors, want, overhead),
    )
    assert [type(i) for i in got[0]] == [type(i) for i in ref[0]]
    assert got == ref
