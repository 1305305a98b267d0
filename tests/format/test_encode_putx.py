"""The PUTX encoder a single put with metadata appends through (issue 37): ``encode_putx``, with its
compiled twin in ``_speedups.c`` (over bytes and plain ints only), writes the record
``record.encode_record`` writes, and the twin hands anything off its fast path to the reference."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journaled.format import fallback, metadata, record, speedups
from journaled.format.metadata import Meta

try:
    from journaled.format import _speedups as native
except ImportError:  # not built here
    native = None  # type: ignore[assignment]
else:
    assert speedups.adopt(native) is None

needs_native = pytest.mark.skipif(native is None, reason="the compiled extension is not built")

u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
metas = st.builds(
    Meta,
    not_before_ms=u64,
    producer=u64,
    sequence=u64,
    key=st.none() | st.binary(min_size=1, max_size=40),
    headers=st.dictionaries(st.text(min_size=1, max_size=8), st.binary(max_size=20), max_size=3),
)


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    """What a call returned, or which exception (type and message) it raised."""
    try:
        return "ok", fn(*args)
    except Exception as exc:  # noqa: BLE001 - the exception itself is what is compared
        return "raised", (type(exc), str(exc))


@settings(max_examples=200, deadline=None)
@given(u32, st.integers(0, 2**40), u64, u64, u64, metas, st.binary(max_size=300), st.binary(max_size=20))
def test_encode_putx_writes_the_record_that_decodes_to_the_item(
    salt, offset, item_id, add_ms, expire_ms, meta, payload, prefix
):
    out = bytearray(prefix)
    speedups.encode_putx(salt, offset, item_id, add_ms, expire_ms, metadata.encode(meta), payload, out)
    body = record.PUT_FIELDS_STRUCT.pack(item_id, add_ms, expire_ms) + metadata.encode(meta) + payload
    assert out == prefix + record.encode_record(salt, offset, record.TYPE_PUTX, body)
    rec = record.decode_one(bytes(out[len(prefix) :]), 0, salt, offset)
    assert isinstance(rec, record.PutX)
    assert (rec.id, rec.add_ms, rec.expire_ms, rec.payload, rec.meta) == (
        item_id,
        add_ms,
        expire_ms,
        payload,
        metadata.decode(body, record.PUT_FIELDS_SIZE, len(body) - len(payload))[0],  # type: ignore[index]
    )


@needs_native
@settings(max_examples=300, deadline=None)
@given(u32, st.integers(0, 2**40), u64, u64, u64, st.binary(max_size=80), st.binary(max_size=300))
def test_the_twin_writes_the_bytes_of_the_reference(salt, offset, item_id, add_ms, expire_ms, meta, payload):
    a, b = bytearray(b"head"), bytearray(b"head")
    args = (salt, offset, item_id, add_ms, expire_ms, meta, payload)
    assert outcome(native.encode_putx, *args, a) == outcome(fallback.encode_putx, *args, b) == ("ok", None)
    assert a == b


@needs_native
@pytest.mark.parametrize(
    "args",
    [
        (1, 0, 2**64, 0, 0, b"m", b"p"),  # an id past its field
        (1, 0, -1, 0, 0, b"m", b"p"),
        (1, 0, 0, 0, -5, b"m", b"p"),
        (-3, 2**70, 5, 0, 0, b"m", b"p"),  # numbers the reference masks
        (1.5, 0, 0, 0, 0, b"m", b"p"),
        (1, 0, 0, 0, 0, bytearray(b"m"), b"p"),  # other buffers: as the reference does
        (1, 0, 0, 0, 0, b"m", memoryview(b"p")),
        (1, 0, 0, 0, 0, "text", b"p"),
        (1, 0, 0, 0, 0, b"m", None),
    ],
)
def test_the_twin_fails_or_succeeds_exactly_as_the_reference(args):
    a, b = bytearray(b"head"), bytearray(b"head")
    assert outcome(native.encode_putx, *args, a) == outcome(fallback.encode_putx, *args, b)
    assert a == b


@needs_native
def test_the_twin_refuses_an_output_that_is_not_a_bytearray_as_the_reference_does():
    args = (1, 0, 0, 0, 0, b"m", b"p", b"")
    assert outcome(native.encode_putx, *args) == outcome(fallback.encode_putx, *args)


@needs_native
def test_the_switch_hands_out_the_twin_when_the_extension_runs():
    """The writer appends through ``speedups.encode_putx``: compiled, that is the twin (a rename in
    either file would otherwise leave every put with metadata on the reference, unnoticed)."""
    if speedups.native is None:
        pytest.skip("pure Python runs in this process (JOURNALED_PURE_PYTHON)")
    assert speedups.encode_putx is native.encode_putx
