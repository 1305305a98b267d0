"""The compiled twins stay memory-safe and agree with their references when Python code runs
inside them.

A twin calls back into Python in more places than it seems: a dict lookup runs the ``__eq__`` of
a key whose hash collides, and on Python 3.11 every allocation of a container (a list, a tuple, an
item) may run the cyclic garbage collector, hence ``gc.callbacks`` and ``__del__`` methods.  That
code can change the very list a twin is walking.  The twins hold their own references across each
such call and re-read sizes after it, so they neither read freed memory nor walk past a list's end,
and they give the reference's answer (which walks the live list) wherever that answer is defined.

Also here: numbers at the edges of the C integer types (where C arithmetic would wrap and Python's
does not), compared value for value with the references.  These tests are the ones
scripts/sanitize_twins.sh runs under AddressSanitizer and UBSan.
"""

from __future__ import annotations

import gc
import struct
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journaled import item
from journaled.format import fallback, record, speedups
from journaled.format.metadata import NO_HEADERS, Meta

try:
    from journaled.format import _speedups as native
except ImportError:  # not built: nothing compiled to check
    native = None  # type: ignore[assignment]
else:  # configure it even when JOURNALED_PURE_PYTHON=1 left it unconfigured (idempotent)
    assert speedups.adopt(native) is None
    _new_item, _new_items, _items_from_puts = fallback.item_references(item.Item, item.MetaItem)
    native.configure_items(
        item_type=item.Item,
        item_fields=fallback.ITEM_FIELDS,
        new_item=_new_item,
        new_items=_new_items,
        items_from_puts=_items_from_puts,
    )

pytestmark = pytest.mark.skipif(native is None, reason="the compiled extension is not built")

py_new_item, py_new_items, py_items_from_puts = fallback.item_references(item.Item, item.MetaItem)


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    """What a call returned, or which exception (type and message) it raised."""
    try:
        return "ok", fn(*args)
    except Exception as exc:  # noqa: BLE001 - the exception itself is what is compared
        return "raised", (type(exc), str(exc))


def item_fields(items: list[Any]) -> list[tuple[Any, ...]]:
    return [(type(i), i.id, i.data, i.add_time, i.expire_at, i.error_count) for i in items]


def same_items_outcome(got: tuple[str, Any], want: tuple[str, Any]) -> None:
    if got[0] == want[0] == "ok":
        assert item_fields(got[1][0]) == item_fields(want[1][0])
        assert got[1][1:] == want[1][1:]
    else:
        assert got == want


def put(item_id: int, payload: bytes = b"x" * 100, add_ms: int = 5, expire_ms: int = 0) -> record.Put:
    return record.Put(0, len(payload) + record.PUT_OVERHEAD, item_id, add_ms, expire_ms, payload)


# ---------------------------------------------------------------------- a key's __eq__ in the lookup


class CollidingKey:
    """An error-count key that collides with the int ``key`` and, when compared, does ``act``."""

    def __init__(self, key: int, act: Callable[[], None]) -> None:
        self.key, self.act = key, act

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        self.act()
        return False


def run_both_with_hostile_key(mutate: Callable[[list[Any]], None], recs: Callable[[], list[Any]]) -> None:
    """items_from_puts, compiled and reference, each on fresh records whose error-count dict holds
    a key that changes the record list when the lookup of the first record's id compares it."""
    outcomes = []
    for fn in (native.items_from_puts, py_items_from_puts):
        records = recs()
        done: list[bool] = []

        def act(records: list[Any] = records, done: list[bool] = done) -> None:
            if not done:
                done.append(True)
                mutate(records)

        outcomes.append(outcome(fn, records, {CollidingKey(records[0].id, act): 3}, 2**40, 10))
    same_items_outcome(*outcomes)


def test_items_from_puts_stops_where_the_reference_does_when_a_key_empties_the_records():
    run_both_with_hostile_key(list.clear, lambda: [put(i) for i in range(1, 50)])


def test_items_from_puts_walks_records_a_key_appends_as_the_reference_does():
    run_both_with_hostile_key(
        lambda recs: recs.extend(put(i, b"new") for i in range(100, 110)),
        lambda: [put(i) for i in range(1, 5)],
    )


@pytest.mark.parametrize(
    "replacement",
    [
        "not a put",
        put(7, bytearray(b"a buffer")),  # type: ignore[arg-type]
        put(7, add_ms=2**60),
        put(7, add_ms=4.5),  # type: ignore[arg-type]
        None,
    ],
    ids=["str", "bytearray-payload", "huge-add-ms", "float-add-ms", "none"],
)
def test_items_from_puts_takes_a_record_a_key_swapped_in_the_references_way(replacement):
    def swap(recs: list[Any]) -> None:
        recs[1:] = [replacement, put(9)]

    run_both_with_hostile_key(swap, lambda: [put(i) for i in range(1, 30)])


# ---------------------------------------------------------------------- the garbage collector


def call_amid_collection(action: Callable[[], None], nth: int, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, with ``action`` run once by a ``gc.callbacks`` entry at the collection that
    starts at ``fn``'s ``nth + 1``-th allocation of a container: the call starts right after a full
    collection with the threshold at ``nth`` (on Python 3.11 a collection starts inside the
    allocation that passes the threshold; later versions defer it, and the call runs undisturbed)."""
    armed: list[bool] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and armed:
            armed.clear()
            action()

    old = gc.get_threshold()
    gc.callbacks.append(callback)
    try:
        gc.collect()
        gc.set_threshold(nth)
        armed.append(True)
        return fn(*args)
    finally:
        gc.set_threshold(*old)
        gc.callbacks.remove(callback)


def payload_batch(n: int = 64, size: int = 2000) -> list[bytes]:
    return [bytes([65 + i % 26]) * size for i in range(n)]


@pytest.mark.parametrize("nth", [1, 2, 3])
def test_encode_puts_never_writes_bytes_freed_by_a_collection_that_empties_the_batch(nth):
    """The batch is emptied (and its memory reused for other bytes) by a collection that starts
    inside the call: the journal holds the whole batch as passed, or nothing."""
    batch = payload_batch()
    original = list(batch)
    junk: list[bytes] = []

    def empty_and_reuse() -> None:
        batch.clear()
        junk.extend(b"\xee" * 2000 for _ in range(64))

    out = bytearray()
    offsets = call_amid_collection(empty_and_reuse, nth, native.encode_puts, 1, 0, 1, 2, 3, batch, out)
    recs, end, damage = fallback.decode_many(bytes(out), 0, 1)
    assert damage is None and end == len(out)
    assert [r.payload for r in recs] in (original, [])
    assert offsets == [r.offset for r in recs]


@pytest.mark.parametrize("nth", [1, 2, 5])
def test_new_items_never_reads_past_a_batch_a_collection_empties(nth):
    """The reference walks the live list: the items are those of a prefix of the batch (all of it
    when the collection came too late to matter), with consecutive ids."""
    batch = payload_batch(size=200)
    original = list(batch)

    def empty_and_reuse() -> None:
        batch.clear()
        payload_batch(size=200)

    items = call_amid_collection(empty_and_reuse, nth, native.new_items, 10, batch, 1.0, None)
    assert [i.data for i in items] == original[: len(items)]
    assert [i.id for i in items] == list(range(10, 10 + len(items)))


@pytest.mark.parametrize("nth", [1, 2, 5])
def test_items_from_puts_never_reads_past_records_a_collection_empties(nth):
    recs = [put(i) for i in range(1, 65)]
    original = list(recs)
    items, total, expiring = call_amid_collection(
        recs.clear, nth, native.items_from_puts, recs, {}, 2**40, 10
    )
    assert [(i.id, i.data) for i in items] == [(r.id, r.payload) for r in original[: len(items)]]
    assert total == 110 * len(items) and expiring is False


# ---------------------------------------------------------------------- numbers at the edges

EDGES = [
    0,
    1,
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**32,
    2**53,
    2**53 + 1,
    2**62 - 1,
    2**62,
    2**62 + 1,
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64,
    -1,
    -(2**63),
]
edge = st.sampled_from(EDGES) | st.integers(-(2**65), 2**65)


def test_items_from_puts_does_not_wrap_at_the_largest_budget():
    """want = overhead = 2**62: the second record's charge takes the total past 2**63."""
    recs = [put(1, b"a"), put(2, b"b")]
    got = native.items_from_puts(recs, {}, 2**62, 2**62)
    assert item_fields(got[0]) == item_fields(py_items_from_puts(recs, {}, 2**62, 2**62)[0])
    assert got[1:] == (2**62 + 1, False)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.binary(max_size=5), min_size=1, max_size=5),
    edge,
    edge,
    st.sampled_from([0, 2**53, 2**53 + 2]),
)
def test_items_from_puts_agrees_on_numbers_at_the_edges(payloads, want, overhead, add_ms):
    recs = [put(i, p, add_ms, add_ms) for i, p in enumerate(payloads)]
    same_items_outcome(
        outcome(native.items_from_puts, recs, {1: 2}, want, overhead),
        outcome(py_items_from_puts, recs, {1: 2}, want, overhead),
    )


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(edge, edge, edge, edge, edge, st.lists(st.binary(max_size=5), max_size=3))
def test_encode_puts_agrees_on_numbers_at_the_edges(salt, offset, first_id, add_ms, expire_ms, batch):
    a, b = bytearray(b"x"), bytearray(b"x")
    assert outcome(native.encode_puts, salt, offset, first_id, add_ms, expire_ms, batch, a) == outcome(
        fallback.encode_puts, salt, offset, first_id, add_ms, expire_ms, batch, b
    )
    assert a == b


def small_journal() -> bytes:
    out = bytearray()
    fallback.encode_puts(7, 2**62 - 200, 2**62, 1, 2, [b"a" * 40, b"b", b""], out)
    return bytes(out)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(edge, edge, edge, edge, st.none() | edge)
def test_decode_many_agrees_on_numbers_at_the_edges(base_offset, salt, pos, max_body, limit):
    buf = small_journal()
    for base in (base_offset, 2**62 - 200):
        assert outcome(native.decode_many, buf, base, salt, pos, max_body, limit) == outcome(
            fallback.decode_many, buf, base, salt, pos, max_body, limit
        )


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(edge, edge, st.sampled_from([0, 7]), edge, edge, edge, edge, edge)
def test_decode_columns_agrees_on_numbers_at_the_edges(
    base, pos, salt, lo, hi, end_offset, max_rows, max_bytes
):
    buf = small_journal()
    for base_offset in (base, 2**62 - 200):
        outs = [[bytearray(), bytearray(), bytearray(), bytearray(4), bytearray()] for _ in range(2)]
        args = (buf, base_offset, salt, pos, lo, hi, end_offset, max_rows, max_bytes)
        assert outcome(native.decode_columns, *args, outs[0]) == outcome(
            fallback.decode_columns, *args, outs[1]
        )
        assert outs[0] == outs[1]


@settings(max_examples=200)
@given(edge, st.lists(st.binary(max_size=3), max_size=3))
def test_new_items_agrees_on_numbers_at_the_edges(first_id, batch):
    got = outcome(native.new_items, first_id, batch, 1.0, None)
    want = outcome(py_new_items, first_id, batch, 1.0, None)
    if got[0] == want[0] == "ok":
        assert item_fields(got[1]) == item_fields(want[1])
    else:
        assert got == want


def test_decode_columns_agrees_at_the_top_of_its_fast_range():
    """Offsets just below INDEX_MAX (2**62), the bounds at it and the byte budget at its cap: the
    compiled path runs (nothing is out of its range) and must append the reference's bytes."""
    out = bytearray()
    fallback.encode_puts(7, 2**62 - 200, 1, 2, 3, [b"a" * 40, b"b", b""], out)
    buf = bytes(out)
    cols = [[bytearray(), bytearray(), bytearray(), bytearray(4), bytearray(b"d" * 10)] for _ in range(2)]
    args = (buf, 2**62 - 200, 7, 0, 0, 2**62, 2**62, 2**62, 1 << 30)
    assert (
        native.decode_columns(*args, cols[0]) == fallback.decode_columns(*args, cols[1]) == (len(buf), 3, 0)
    )
    assert cols[0] == cols[1]
    assert struct.unpack("<4i", cols[0][3]) == (0, 50, 51, 51)


# ---------------------------------------------------------------------- what configure() accepts


def configure_args(**changes: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "constants": speedups.layout(),
        "put_type": record.Put,
        "put_fields": ("offset", "size", "id", "add_ms", "expire_ms", "payload"),
        "putx_type": record.PutX,
        "putx_fields": ("offset", "size", "id", "add_ms", "expire_ms", "payload", "meta"),
        "meta_type": Meta,
        "meta_fields": ("not_before_ms", "producer", "sequence", "key", "headers"),
        "no_headers": NO_HEADERS,
        "damage_type": record.Damage,
        "encode_puts": fallback.encode_puts,
        "decode_many": fallback.decode_many,
        "decode_one": record.decode_one,
        "decode_columns": fallback.decode_columns,
    }
    args.update(changes)
    return args


def still_decodes() -> None:
    buf = small_journal()
    assert native.decode_many(buf, 2**62 - 200, 7) == fallback.decode_many(buf, 2**62 - 200, 7)


class PropertyPut:
    """Fields with the right names that are properties: getting one runs Python code."""

    def _get(self) -> int:
        return 0

    def _set(self, value: object) -> None:
        pass

    offset = size = id = add_ms = expire_ms = payload = property(_get, _set)


def test_configure_refuses_fields_that_are_not_plain_slots():
    """The twins get and set fields through their descriptors, between reads of lists they hold no
    reference into: only slots (whose get and set run no Python code) are accepted."""
    with pytest.raises(TypeError, match="PropertyPut's fields must be slots"):
        native.configure(**configure_args(put_type=PropertyPut))
    still_decodes()


class IndexOne:
    def __index__(self) -> int:
        return 1


def test_configure_refuses_a_layout_constant_that_is_not_an_int():
    with pytest.raises(TypeError, match="format/record.py's TYPE_PUT must be an int"):
        native.configure(**configure_args(constants={**speedups.layout(), "TYPE_PUT": IndexOne()}))
    still_decodes()


def test_decode_many_refuses_a_decode_one_size_that_would_leave_the_buffer():
    """A decode_one other than record.py's (only configure() can install one) says a record takes
    -10**6 bytes: the twin refuses rather than read before the buffer."""

    def backwards(buf: Any, pos: int, base_offset: int, salt: int, max_body: int) -> record.Skipped:
        return record.Skipped(base_offset + pos, -(10**6), 0x80)

    buf = small_journal() + b"\x00" * 40
    native.configure(**configure_args(decode_one=backwards))
    try:
        with pytest.raises(ValueError, match="decode_one returned a record of size -1000000 at position 140"):
            native.decode_many(buf, 2**62 - 200, 7)
    finally:
        assert speedups.adopt(native) is None
    still_decodes()


# ------------------------------------------------------------- PUTX records carrying only a tag


class PropertyIdPutX(record.PutX):
    """A PutX whose ``id`` is a property: reading it runs Python code."""

    __slots__ = ()

    @property  # type: ignore[misc]
    def id(self) -> int:  # type: ignore[override]
        return 0


class LenMapping(dict):  # type: ignore[type-arg]
    """A mapping whose ``len`` runs Python code (here: it raises)."""

    def __len__(self) -> int:
        raise RuntimeError("len ran")


class PropertyMeta:
    """Meta's field names as properties."""

    not_before_ms = producer = sequence = key = headers = property(lambda self: 0)


def test_configure_refuses_putx_and_meta_classes_it_cannot_build():
    import types

    refusals: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"putx_type": record.Damage}, TypeError, "putx_type must be a subclass of Put"),
        (
            {"putx_fields": ("offset", "size", "id", "add_ms", "expire_ms", "payload")},
            ValueError,
            "does not build",
        ),
        ({"putx_type": PropertyIdPutX}, TypeError, "PropertyIdPutX's fields must be slots"),
        ({"meta_type": PropertyMeta}, TypeError, "PropertyMeta's fields must be slots"),
        (
            {"meta_fields": ("producer", "not_before_ms", "sequence", "key", "headers")},
            ValueError,
            "does not build",
        ),
        ({"no_headers": {}}, TypeError, "no_headers must be a mappingproxy, not dict"),
        ({"no_headers": types.MappingProxyType({"h": b"v"})}, ValueError, "no_headers must be empty"),
        ({"no_headers": types.MappingProxyType(LenMapping())}, RuntimeError, "len ran"),
        ({"putx_type": None}, TypeError, "must be type"),
    ]
    for change, exc, message in refusals:
        with pytest.raises(exc, match=message):
            native.configure(**configure_args(**change))
        still_decodes()
    with pytest.raises(TypeError, match="takes all of its keyword arguments"):
        native.configure(**{k: v for k, v in configure_args().items() if k != "no_headers"})


def tagged_journal() -> bytes:
    out = bytearray()
    for i in range(6):
        meta = Meta(0, 3, i) if i % 2 else Meta(0, 3, i, b"k")
        out += record.encode_putx(7, len(out), 100 + i, 5, 0, meta, b"p" * (i * 40))
    return bytes(out)


def test_items_from_puts_hands_putx_records_it_cannot_vouch_for_to_the_reference():
    """A PutX whose Meta is a subclass, holds a not-before past the C types, headers other than the
    shared empty ones, or is not set: the reference's answer (or its error), item for item."""

    class Sneaky(Meta):
        """A subclass: the fast path takes exactly Meta."""

    def putx(meta: Any) -> record.PutX:
        return record.PutX(0, 70, 9, 5, 0, b"d", meta)

    unset = object.__new__(record.PutX)
    for name in ("offset", "size", "id", "add_ms", "expire_ms", "payload"):
        object.__setattr__(unset, name, 1 if name != "payload" else b"d")
    cases = [
        [putx(Sneaky(0, 1, 1))],
        [putx(Meta(2**70, 1, 1))],
        [putx(Meta(0, 1, 1, None, {}))],
        [record.Put(0, 34, 8, 5, 0, b"a"), putx(Meta(0, 1, 1, None, {}))],
        [putx(Meta(0, 1, 1)), unset],
        [unset],
    ]
    for recs in cases:
        got, want = (
            outcome(native.items_from_puts, recs, {}, 2**20, 3),
            outcome(py_items_from_puts, recs, {}, 2**20, 3),
        )
        if got[0] == want[0] == "ok":
            assert [type(i) for i in got[1][0]] == [type(i) for i in want[1][0]]
        assert got == want


@pytest.mark.parametrize("nth", range(6))
def test_decoding_tag_only_putx_survives_a_collection_that_reconfigures_the_module(nth):
    """A collection started by an allocation inside the decode reconfigures the module with new
    (equal) classes' references: the records built are still whole and equal the reference's."""
    buf = tagged_journal()
    calls = {"n": 0}

    def reconfigure(phase: str, info: dict[str, Any]) -> None:
        calls["n"] += 1
        if phase == "start" and calls["n"] == nth + 1:
            assert speedups.adopt(native) is None

    gc.callbacks.append(reconfigure)
    threshold = gc.get_threshold()
    gc.set_threshold(1)
    try:
        got = native.decode_many(buf, 0, 7)
        walked = native.walk_puts(buf, 0, 7, 0, 0, 100, 2**20, 0, True)
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(reconfigure)
    assert got == fallback.decode_many(buf, 0, 7)
    assert walked == fallback.walk_puts(buf, 0, 7, 0, 0, 100, 2**20, 0, True)
