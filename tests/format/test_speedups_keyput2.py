"""The compiled builders of a single put's ``Meta`` and ``MetaItem`` (``_speedups.new_meta`` and
``new_meta_item``) make the objects their references (``fallback_meta.meta_references``) make, and leave
them out of the cyclic collector's walks exactly when nothing they hold can lead back to them: plain
ints, bytes, None, the shared empty headers or a read-only mapping of exact ``str`` to exact
``bytes``, and for a ``MetaItem`` a ``Meta`` left out already.  Anything else stays tracked, so a
cycle through it is still collected (issue 37: a put with a key or headers)."""

from __future__ import annotations

import gc
from types import MappingProxyType
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journaled import item
from journaled.format import fallback, fallback_meta, metadata, speedups
from journaled.format.metadata import NO_HEADERS, Meta

try:
    from journaled.format import _speedups as native
except ImportError:  # not built: nothing compiled to compare
    native = None  # type: ignore[assignment]
else:  # configured even when JOURNALED_PURE_PYTHON=1 left it unconfigured (idempotent)
    assert speedups.adopt(native) is None

pytestmark = pytest.mark.skipif(native is None, reason="the compiled extension is not built")

ref_new_meta, ref_new_meta_item = fallback_meta.meta_references(item.MetaItem)


def configure_items(**change: Any) -> None:
    """The compiled item twins configured as journaled.item configures them (also when
    JOURNALED_PURE_PYTHON=1 left them unconfigured), with ``change`` replacing some arguments."""
    new_item, new_items, items_from_puts = fallback.item_references(item.Item, item.MetaItem)
    args = {
        "item_type": item.Item,
        "item_fields": fallback.ITEM_FIELDS,
        "new_item": new_item,
        "new_items": new_items,
        "items_from_puts": items_from_puts,
        "meta_item": item.MetaItem,
        "meta_item_fields": fallback_meta.META_ITEM_FIELDS,
    }
    args.update(change)
    native.configure_items(**{k: v for k, v in args.items() if v is not None or k == "meta_item"})


@pytest.fixture(autouse=True)
def configured() -> Any:
    if native is not None:
        configure_items()
    yield
    if native is not None:
        configure_items()


u64 = st.integers(0, (1 << 64) - 1)
keys = st.none() | st.binary(min_size=1, max_size=20)
atomic_headers = st.dictionaries(st.text(min_size=1, max_size=8), st.binary(max_size=8), max_size=5).map(
    lambda d: MappingProxyType(d) if d else NO_HEADERS
)


def same_object(a: Any, b: Any) -> None:
    assert type(a) is type(b)
    assert a == b and attrs.asdict(a, recurse=False) == attrs.asdict(b, recurse=False)


@settings(max_examples=200)
@given(nb=u64, producer=u64, sequence=u64, key=keys, headers=atomic_headers)
def test_new_meta_builds_what_the_reference_builds_left_out_of_the_collector(
    nb, producer, sequence, key, headers
):
    built = native.new_meta(nb, producer, sequence, key, headers)
    same_object(built, ref_new_meta(nb, producer, sequence, key, headers))
    same_object(built, Meta(nb, producer, sequence, key, headers))
    assert not gc.is_tracked(built)


@settings(max_examples=200)
@given(
    item_id=u64, data=st.binary(max_size=20), add_ms=st.integers(0, 1 << 45), key=keys, headers=atomic_headers
)
def test_new_meta_item_builds_what_the_reference_builds_left_out_of_the_collector(
    item_id, data, add_ms, key, headers
):
    meta = native.new_meta(0, 0, 0, key, headers)
    args = (item_id, data, add_ms / 1000.0, None, 0, meta)
    built = native.new_meta_item(*args)
    same_object(built, ref_new_meta_item(*args))
    same_object(built, item.MetaItem(*args))
    assert not gc.is_tracked(built)
    assert (built.key, dict(built.headers), built.not_before) == (key, dict(headers), None)


@pytest.mark.parametrize(
    "fields",
    [
        (0, 0, 0, bytearray(b"k"), NO_HEADERS),  # a mutable key
        (0, 0, 0, None, {"h": b"v"}),  # a dict, not a read-only mapping
        (0, 0, 0, None, MappingProxyType({"h": [b"v"]})),  # a container among the values
        (0, 0, 0, None, MappingProxyType({"h": bytearray(b"v")})),
        (0, 0, 0, None, MappingProxyType({1: b"v"})),
        (0, 0, 0, None, MappingProxyType({f"h{i}": b"" for i in range(65)})),  # more than a put takes
        ([], 0, 0, None, NO_HEADERS),
    ],
)
def test_a_meta_holding_anything_else_stays_tracked_and_so_does_its_item(fields):
    built = native.new_meta(*fields)
    same_object(built, ref_new_meta(*fields))
    assert gc.is_tracked(built)
    assert gc.is_tracked(native.new_meta_item(1, b"x", 1.0, None, 0, built))


def test_a_cycle_through_a_built_meta_is_collected():
    class Box:
        pass

    box = Box()
    meta = native.new_meta(0, 0, 0, None, MappingProxyType({"h": box}))  # type: ignore[dict-item]
    box.meta = meta  # type: ignore[attr-defined]
    alive = [box]
    gc.collect()
    del box, meta
    found = [o for o in gc.get_objects() if type(o) is Box and o not in alive]
    assert found == []
    alive.clear()
    gc.collect()
    assert not [o for o in gc.get_objects() if type(o) is Box]


def test_an_item_field_that_is_a_container_keeps_the_meta_item_tracked():
    meta = native.new_meta(0, 0, 0, b"k", NO_HEADERS)
    assert not gc.is_tracked(meta)
    assert gc.is_tracked(native.new_meta_item(1, b"x", 1.0, [], 0, meta))
    assert gc.is_tracked(native.new_meta_item(1, bytearray(b"x"), 1.0, None, 0, meta))


def test_calls_off_the_fast_path_are_the_constructors():
    assert native.new_meta(key=b"k") == Meta(key=b"k")
    assert native.new_meta(1, 2) == Meta(1, 2)
    meta = Meta(key=b"k")
    assert native.new_meta_item(1, b"x", 1.0, stored=meta) == item.MetaItem(1, b"x", 1.0, stored=meta)
    with pytest.raises(TypeError):
        native.new_meta(1, 2, 3, None, NO_HEADERS, 6)


def test_new_meta_item_builds_the_class_checked_whatever_meta_item_is_configured_later():
    calls = []

    def meta_item(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return item.MetaItem(*args, **kwargs)

    for later in (meta_item, None):  # items_from_puts' builder, as tests configure it
        configure_items(meta_item=later, meta_item_fields=None)
        built = native.new_meta_item(1, b"x", 1.0, None, 0, native.new_meta(0, 0, 0, b"k", NO_HEADERS))
        assert type(built) is item.MetaItem and not gc.is_tracked(built)
    assert calls == []
    # a call off the fast path is the configured builder's
    configure_items(meta_item=meta_item, meta_item_fields=None)
    meta = Meta(key=b"k")
    assert native.new_meta_item(1, b"x", 1.0, stored=meta) == item.MetaItem(1, b"x", 1.0, stored=meta)
    assert len(calls) == 1


@pytest.mark.parametrize(
    "change",
    [
        {"meta_item_fields": ("id", "data", "add_time", "expire_at", "error_count")},
        {"meta_item_fields": ("id", "data", "add_time", "expire_at", "error_count", "other")},
        {"meta_item": Meta},  # not a subclass of the item type
        {"meta_item": None},
    ],
)
def test_configure_items_refuses_a_meta_item_it_cannot_build(change):
    with pytest.raises((TypeError, ValueError)):
        configure_items(**change)
    # refused: what was configured still builds
    meta = native.new_meta(0, 0, 0, b"k", NO_HEADERS)
    assert not gc.is_tracked(native.new_meta_item(1, b"x", 1.0, None, 0, meta))


def test_the_references_refuse_a_meta_item_class_with_other_fields():
    @attrs.frozen(slots=True)
    class Other(item.Item):
        extra: int = 0

    with pytest.raises(TypeError, match="fields other than"):
        fallback_meta.meta_references(Other)


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        hdrs, block = fn(*args)
    except Exception as exc:  # noqa: BLE001 - the exception itself is what is compared
        return "raised", (type(exc), str(exc))
    return "ok", (type(hdrs), dict(hdrs), block, hdrs is NO_HEADERS)


names = (
    st.text(max_size=4)
    | st.text(min_size=250, max_size=260)
    | st.sampled_from(["\ud800", "é" * 128, "a" * 255])
)
values = st.binary(max_size=8) | st.builds(bytearray, st.binary(max_size=4)) | st.integers() | st.none()


@settings(max_examples=300)
@given(
    st.dictionaries(names, values, max_size=6)
    | st.dictionaries(st.text(max_size=2), st.binary(), max_size=70)
)
def test_checked_headers_returns_and_raises_what_the_reference_does(headers):
    assert outcome(native.checked_headers, headers) == outcome(metadata.checked_headers, headers)


@pytest.mark.parametrize(
    "headers",
    [
        {"big": b"x" * (64 * 1024)},  # the block passes MAX_HEADER_BYTES
        {"a": b"x" * (32 * 1024), "b": b"y" * (32 * 1024 - 11)},  # exactly at it
        {"a": b"x" * (32 * 1024), "b": b"y" * (32 * 1024 - 10)},  # one byte over
        {f"h{i}": b"" for i in range(64)},
        {f"h{i}": b"" for i in range(65)},
        MappingProxyType({"a": b"b"}),  # another mapping: the reference's
        [("a", b"b")],
        None,
    ],
)
def test_checked_headers_agrees_at_the_limits_and_off_the_fast_path(headers):
    assert outcome(native.checked_headers, headers) == outcome(metadata.checked_headers, headers)


def test_checked_headers_keeps_a_copy_the_caller_cannot_change():
    given_headers = {"a": b"b"}
    hdrs, _ = native.checked_headers(given_headers)
    given_headers["a"] = b"changed"
    given_headers["new"] = b"x"
    assert dict(hdrs) == {"a": b"b"}


def encoded(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except Exception as exc:  # noqa: BLE001 - the exception itself is what is compared
        return "raised", (type(exc), str(exc))


field = st.integers(0, (1 << 64) - 1) | st.integers(-3, -1) | st.integers(1 << 64, (1 << 64) + 3)


@settings(max_examples=300)
@given(
    nb=field,
    producer=field,
    sequence=field,
    key=st.none() | st.binary(max_size=20) | st.builds(bytearray, st.binary(max_size=3)),
    count=st.integers(-1, 0x10001),
    block=st.binary(max_size=30) | st.builds(bytearray, st.binary(max_size=3)),
)
def test_encode_meta_returns_and_raises_what_encode_parts_does(nb, producer, sequence, key, count, block):
    assert encoded(native.encode_meta, nb, producer, sequence, key, count, block) == encoded(
        metadata.encode_parts, nb, producer, sequence, key, count, block
    )


@pytest.mark.parametrize("key_len", [0xFFFF, 0x10000])
def test_encode_meta_agrees_at_the_key_length_limit(key_len):
    key = b"k" * key_len
    assert encoded(native.encode_meta, 1, 2, 3, key, 1, b"xy") == encoded(
        metadata.encode_parts, 1, 2, 3, key, 1, b"xy"
    )


def test_encode_meta_makes_what_metadata_encode_makes():
    hdrs, block = native.checked_headers({"ct": b"json", "é": b""})
    meta = Meta(5, 6, 7, b"key", hdrs)
    assert native.encode_meta(5, 6, 7, b"key", len(hdrs), block) == metadata.encode(meta)
    assert metadata.decode(
        b"\0" * 3 + native.encode_meta(5, 6, 7, b"key", len(hdrs), block), 3, 3 + 32 + 3 + len(block)
    ) == (
        meta,
        3 + 32 + 3 + len(block),
    )
