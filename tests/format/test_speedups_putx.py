"""PUTX records that carry only a producer's tag take the compiled fast paths.

Every put a client process makes is a PUTX with a producer tag and nothing else (no key, no
headers, no not-before).  Readers never see the tag, so such a record reads back as a plain
``Item``, and the compiled twins decode it (``decode_many``, ``walk_puts``) and turn it into an item
(``items_from_puts``) without calling their references (so are PUTXs with more metadata:
tests/format/test_speedups_meta.py).  The columnar walk of the Spark source (``decode_columns``)
takes a tag-only PUTX as a row like a PUT's and, without the metadata columns, stops at any other
PUTX.  Compiled and reference agree value for value and error for error on random buffers mixing
PUTs, tag-only PUTXs, PUTXs with metadata and damage.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journaled import item
from journaled.format import columns, fallback, record, speedups
from journaled.format.metadata import NO_HEADERS, Meta
from journaled.format.record import MAX_BODY, PutX

try:
    from journaled.format import _speedups as native
except ImportError:  # not built: only the reference's decisions can be checked
    native = None  # type: ignore[assignment]
else:  # configured even when JOURNALED_PURE_PYTHON=1 left it unconfigured (idempotent)
    assert speedups.adopt(native) is None

needs_native = pytest.mark.skipif(native is None, reason="the compiled extension is not built")

SALT = 0x5EED
ADD_MS = 1_700_000_000_123
BIG = 1 << 30
ref_new_item, ref_new_items, ref_items_from_puts = fallback.item_references(item.Item, item.MetaItem)


def outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the exception itself is what is compared
        return "raised", (type(exc), str(exc))


def records(
    specs: list[tuple[Meta | None, bytes]], first_id: int = 1, base: int = 0, salt: int = SALT
) -> bytes:
    """A journal chunk: a PUT for each ``(None, payload)``, a PUTX for each ``(meta, payload)``."""
    out = bytearray()
    for i, (meta, payload) in enumerate(specs):
        offset = base + len(out)
        if meta is None:
            out += record.encode_put(salt, offset, first_id + i, ADD_MS, 0, payload)
        else:
            out += record.encode_putx(salt, offset, first_id + i, ADD_MS, 0, meta, payload)
    return bytes(out)


def tag(producer: int, sequence: int) -> Meta:
    return Meta(0, producer, sequence, None, NO_HEADERS)


def compiled_items_from_puts() -> Callable[..., Any]:
    """The compiled ``items_from_puts``, configured as journaled.item does (also under
    JOURNALED_PURE_PYTHON=1, where the switch leaves it unconfigured)."""
    native.configure_items(
        item_type=item.Item,
        item_fields=fallback.ITEM_FIELDS,
        new_item=ref_new_item,
        new_items=ref_new_items,
        items_from_puts=ref_items_from_puts,
    )
    return native.items_from_puts  # type: ignore[no-any-return]


@contextmanager
def spying(**names: str) -> Iterator[dict[str, int]]:
    """The compiled module configured with references that count their calls (by name), then
    configured back as the switch does."""
    calls = {name: 0 for name in names}

    def counted(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return fn(*args, **kwargs)

        return call

    args = speedups.configure_arguments()
    for name in names:
        args[name] = counted(name, args[name])
    native.configure(**args)
    try:
        yield calls
    finally:
        assert speedups.adopt(native) is None


# ------------------------------------------------------------------------- the reference decides


def test_a_putx_carrying_only_a_producer_tag_reads_back_as_a_plain_item():
    buf = records([(tag(7, 1), b"tagged"), (tag(7, 2), b"")])
    recs, end, damage = fallback.decode_many(buf, 0, SALT)
    assert (end, damage) == (len(buf), None) and [type(r) for r in recs] == [PutX, PutX]
    items, total, expiring = ref_items_from_puts(recs, {2: 3}, BIG, 10)
    assert [type(i) for i in items] == [item.Item, item.Item]
    assert [(i.id, i.data, i.error_count, i.meta, i.key, dict(i.headers)) for i in items] == [
        (1, b"tagged", 0, None, None, {}),
        (2, b"", 3, None, None, {}),
    ]
    assert (total, expiring) == (6 + 10 + 10, False)


@pytest.mark.parametrize(
    "meta",
    [
        Meta(0, 7, 1, b"k", NO_HEADERS),
        Meta(0, 7, 1, None, {"h": b"v"}),
        Meta(ADD_MS + 5000, 7, 1, None, NO_HEADERS),
        Meta(ADD_MS + 5000, 0, 0, None, NO_HEADERS),
    ],
)
def test_a_putx_with_a_key_headers_or_a_not_before_reads_back_as_a_meta_item(meta):
    recs = fallback.decode_many(records([(meta, b"x")]), 0, SALT)[0]
    items = ref_items_from_puts(recs, {}, BIG, 0)[0]
    assert type(items[0]) is item.MetaItem and items[0].meta == meta


def test_the_queue_reads_a_tagged_put_back_as_a_plain_item_after_a_reopen(tmp_path):
    from journaled import JournaledQueue, ReaderConfig

    path = str(tmp_path / "q")
    with JournaledQueue(path) as q:
        q.put_many([b"a", b"b"], producer=(99, 1))
        q.put(b"c", key=b"k")
    with JournaledQueue(path) as q:
        r = q.reader("late", ReaderConfig(start="earliest"))
        got = [r.get(timeout=5) for _ in range(3)]
    assert [(type(i), i.data, i.meta) for i in got[:2]] == [(item.Item, b"a", None), (item.Item, b"b", None)]
    assert type(got[2]) is item.MetaItem and got[2].key == b"k"


# ---------------------------------------------------------------------------- compiled fast path


@needs_native
def test_a_tag_only_putx_is_decoded_in_c_into_the_references_record():
    buf = records([(None, b"plain"), (tag(5, 10), b"tagged" * 30), (tag(2**64 - 1, 2**64 - 1), b"")], base=64)
    with spying(decode_one="decode_one", decode_many="decode_many") as calls:
        got = native.decode_many(buf, 64, SALT)
    assert calls == {"decode_one": 0, "decode_many": 0}
    assert got == fallback.decode_many(buf, 64, SALT)
    recs = got[0]
    assert [type(r) for r in recs] == [record.Put, PutX, PutX]
    assert recs[1].meta == tag(5, 10) and recs[1].meta.headers is NO_HEADERS
    assert type(recs[1].meta) is Meta and recs[1].size == len(b"tagged" * 30) + record.PUTX_OVERHEAD


@needs_native
def test_a_tag_only_putx_is_walked_in_c():
    buf = records([(tag(5, i), b"p" * i) for i in range(1, 6)])
    with spying(walk_puts="walk_puts", decode_one="decode_one") as calls:
        got = native.walk_puts(buf, 0, SALT, 0, 1, BIG, BIG, 0, True)
    assert calls == {"walk_puts": 0, "decode_one": 0}
    assert got == fallback.walk_puts(buf, 0, SALT, 0, 1, BIG, BIG, 0, True)
    assert [type(p) for p in got[0]] == [PutX] * 5


@needs_native
def test_a_putx_with_a_key_headers_or_a_not_before_is_decoded_in_c_too():
    buf = records(
        [
            (tag(5, 1), b"a"),
            (Meta(0, 5, 2, b"key", NO_HEADERS), b"b"),
            (Meta(9, 0, 0, None, {"h": b"v"}), b"c"),
        ]
    )
    with spying(decode_one="decode_one") as calls:
        got = native.decode_many(buf, 0, SALT)
    assert calls == {"decode_one": 0}
    assert got == fallback.decode_many(buf, 0, SALT)


@needs_native
def test_items_of_tag_only_putx_records_are_built_in_c():
    recs = fallback.decode_many(records([(None, b"a"), (tag(1, 1), b"b"), (tag(1, 2), b"c")]), 0, SALT)[0]
    calls = {"n": 0}

    def counted(*args: Any) -> Any:
        calls["n"] += 1
        return ref_items_from_puts(*args)

    native.configure_items(
        item_type=item.Item,
        item_fields=fallback.ITEM_FIELDS,
        new_item=ref_new_item,
        new_items=ref_new_items,
        items_from_puts=counted,
    )
    try:
        got = native.items_from_puts(recs, {3: 1}, BIG, 5)
    finally:
        compiled_items_from_puts()
    assert calls["n"] == 0
    want = ref_items_from_puts(recs, {3: 1}, BIG, 5)
    assert [type(i) for i in got[0]] == [item.Item] * 3 and got[0] == want[0] and got[1:] == want[1:]


@needs_native
def test_records_and_items_of_tag_only_putx_are_left_out_of_the_collectors_walks():
    """Their fields are plain values and the one shared empty header mapping: no cycle possible."""
    items_from_puts = compiled_items_from_puts()
    puts = native.walk_puts(
        records([(tag(3, 1), b"a"), (tag(3, 2), b"b")]), 0, SALT, 0, 1, BIG, BIG, 0, True
    )[0]
    assert [gc.is_tracked(p) for p in puts] == [False, False]
    assert [gc.is_tracked(p.meta) for p in puts] == [False, False]
    assert [gc.is_tracked(i) for i in items_from_puts(puts, {}, BIG, 0)[0]] == [False, False]


# ------------------------------------------------------------------------------ columnar decoding


def run_columns(decode_columns: Callable[..., Any], buf: bytes, *args: Any) -> tuple[Any, list[bytes]]:
    """``decode_columns`` over all of ``buf`` (or ``args``' range) into fresh columns."""
    out = columns.new_columns()
    got = decode_columns(buf, *(args or (0, SALT, 0, 0, 2**62, 2**62, 1 << 20, BIG)), out)
    return got, [bytes(c) for c in out]


@pytest.mark.parametrize("twin", ["reference", "compiled"])
def test_decode_columns_takes_a_tag_only_putx_as_the_row_of_the_same_put(twin):
    if twin == "compiled" and native is None:
        pytest.skip("the compiled extension is not built")
    decode_columns = fallback.decode_columns if twin == "reference" else native.decode_columns
    payloads = [b"", b"tagged" * 30, b"x"]
    tagged = records([(tag(7, 100 + i), p) for i, p in enumerate(payloads)], first_id=5)
    plain = records([(None, p) for p in payloads], first_id=5)
    (pos, last, status), cols = run_columns(decode_columns, tagged)
    assert (pos, last, status) == (len(tagged), 7, columns.MORE)
    assert cols == run_columns(decode_columns, plain)[1]


@pytest.mark.parametrize("twin", ["reference", "compiled"])
@pytest.mark.parametrize(
    "meta",
    [
        Meta(0, 7, 1, b"key", NO_HEADERS),
        Meta(0, 7, 1, None, {"h": b"v"}),
        Meta(ADD_MS + 1, 7, 1, None, NO_HEADERS),
    ],
)
def test_decode_columns_still_stops_at_a_putx_carrying_more_than_a_tag(twin, meta):
    if twin == "compiled" and native is None:
        pytest.skip("the compiled extension is not built")
    decode_columns = fallback.decode_columns if twin == "reference" else native.decode_columns
    buf = records([(tag(7, 0), b"a"), (meta, b"b"), (tag(7, 2), b"c")])
    at = len(records([(tag(7, 0), b"a")]))
    (pos, last, status), cols = run_columns(decode_columns, buf)
    assert (pos, last, status) == (at, 1, columns.MORE)
    assert cols[4] == b"a"


@needs_native
def test_decode_columns_walks_tag_only_putx_records_in_c():
    buf = records([(tag(5, i), b"p" * i) for i in range(1, 6)] + [(None, b"plain")])
    with spying(decode_columns="decode_columns") as calls:
        got = run_columns(native.decode_columns, buf)
    assert calls == {"decode_columns": 0}
    assert got == run_columns(fallback.decode_columns, buf)


# ------------------------------------------------------------------------ twins equal, by hypothesis

u64 = st.integers(0, 2**64 - 1)
metas = st.one_of(
    st.none(),
    st.builds(tag, u64, u64),
    st.builds(
        Meta,
        st.sampled_from([0, ADD_MS + 1]),
        u64,
        u64,
        st.none() | st.binary(min_size=1, max_size=8),
        st.dictionaries(st.text(min_size=1, max_size=4), st.binary(max_size=6), max_size=3),
    ),
)


@st.composite
def mixed_journals(draw: Any) -> tuple[bytes, int]:
    """PUTs, tag-only PUTXs and PUTXs with metadata, then cut, flipped, zeroed or overwritten."""
    base = draw(st.integers(0, 2**33))
    specs = draw(st.lists(st.tuples(metas, st.binary(max_size=80)), max_size=10))
    buf = bytearray(records(specs, draw(st.integers(0, 2**62)), base))
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["cut", "flip", "zero", "garbage", "lengths"]))
        at = draw(st.integers(0, len(buf)))
        if kind == "cut":
            del buf[at:]
        elif kind == "flip" and at < len(buf):
            buf[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "zero":
            buf[at : at + draw(st.integers(1, 40))] = bytes(draw(st.integers(1, 40)))
        elif kind == "garbage":
            buf[at:at] = draw(st.binary(min_size=1, max_size=40))
        elif kind == "lengths":
            # a CRC-valid tag-only PUTX whose metadata lengths lie: damage, never an item
            body = bytearray(record.PUT_FIELDS_STRUCT.pack(1, ADD_MS, 0) + bytes(32) + b"pay")
            field = draw(st.sampled_from([0, 24, 26, 28]))  # not-before, key, count, block
            body[24 + field] = draw(st.integers(1, 255))
            buf += record.encode_record(SALT, base + len(buf), record.TYPE_PUTX, bytes(body))
    return bytes(buf), base


@needs_native
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(mixed_journals(), st.integers(0, 40), st.none() | st.integers(0, 12))
def test_decode_many_agrees_on_mixed_journals(case, pos, limit):
    buf, base = case
    for kind in (bytes, bytearray, memoryview):
        got = outcome(native.decode_many, kind(buf), base, SALT, pos, MAX_BODY, limit=limit)
        want = outcome(fallback.decode_many, kind(buf), base, SALT, pos, MAX_BODY, limit=limit)
        assert got == want
        if got[0] == "ok":
            assert [type(r) for r in got[1][0]] == [type(r) for r in want[1][0]]
            assert [type(r.meta) for r in got[1][0] if type(r) is PutX] == [
                type(r.meta) for r in want[1][0] if type(r) is PutX
            ]


@needs_native
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    mixed_journals(),
    st.integers(0, 40),
    st.integers(0, 2**62),
    st.integers(0, 12),
    st.integers(0, 400),
    st.integers(0, 100),
    st.booleans(),
)
def test_walk_puts_agrees_on_mixed_journals(case, pos, expected, max_items, max_bytes, nbytes, first_free):
    buf, base = case
    for kind in (bytes, bytearray):
        args = (kind(buf), base, SALT, pos, expected, max_items, max_bytes, nbytes, first_free)
        assert outcome(native.walk_puts, *args) == outcome(fallback.walk_puts, *args)


@needs_native
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(mixed_journals(), st.integers(0, 600), st.integers(0, 50))
def test_items_from_puts_agrees_on_mixed_records(case, want, overhead):
    buf, base = case
    recs = fallback.decode_many(buf, base, SALT)[0]
    errors = {r.id: 2 for r in recs[:2]}
    compiled = compiled_items_from_puts()
    got, ref = compiled(recs, errors, want, overhead), ref_items_from_puts(recs, errors, want, overhead)
    assert [type(i) for i in got[0]] == [type(i) for i in ref[0]]
    assert got == ref


@needs_native
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    mixed_journals(),
    st.integers(0, 40),
    st.integers(0, 2**62),
    st.sampled_from([2**62]) | st.integers(0, 2**62),
    st.sampled_from([2**62]) | st.integers(0, 2**34),
    st.integers(0, 12),
    st.integers(0, 400),
    st.lists(st.binary(max_size=24), min_size=5, max_size=5),
)
def test_decode_columns_agrees_on_mixed_journals(case, pos, lo, hi, end_offset, max_rows, max_bytes, prefill):
    """The same return value (or error), the same bytes appended to columns that already hold some."""
    buf, base = case
    args = (buf, base, SALT, pos, lo, hi, end_offset, max_rows, max_bytes)
    outs = [[bytearray(c) for c in [*prefill[:3], bytes(4), prefill[4]]] for _ in range(2)]
    assert outcome(native.decode_columns, *args, outs[0]) == outcome(fallback.decode_columns, *args, outs[1])
    assert outs[0] == outs[1]
    whole = (buf, base, SALT, 0, 0, 2**62, 2**62, 1 << 20, BIG)
    assert run_columns(native.decode_columns, *whole) == run_columns(fallback.decode_columns, *whole)
