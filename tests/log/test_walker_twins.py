"""The record walker reads the same records, positions and damage with the compiled ``walk_puts`` and
with its pure-Python reference, whatever the budgets, the chunk size and the damage, over journals
mixing PUTs, PUTXs carrying only a producer's tag (every client put) and PUTXs with a key."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journaled.format import fallback, speedups
from journaled.format.metadata import Meta
from journaled.format.record import FileHeader, encode_header, encode_put, encode_putx
from journaled.log import walker
from journaled.log.walker import FileWalker, Span

SALT = 0x5EED

pytestmark = pytest.mark.skipif(speedups.native is None, reason="the compiled twins are not in use")


def image(sizes: list[int], first_id: int, kinds: list[int]) -> bytearray:
    """Records of ``sizes``; the k-th a PUT, a tag-only PUTX or a PUTX with a key as kinds[k] % 3."""
    header = FileHeader(salt=SALT, first_id=first_id, created_ms=1, name="q")
    data = bytearray(encode_header(header))
    for k, n in enumerate(sizes):
        payload = bytes([k % 251]) * n
        kind = kinds[k % len(kinds)] % 3 if kinds else 0
        if kind == 0:
            data += encode_put(SALT, len(data), first_id + k, 1000 + k, k % 3, payload)
        else:
            meta = Meta(0, 77, k, b"key" if kind == 2 else None)
            data += encode_putx(SALT, len(data), first_id + k, 1000 + k, k % 3, meta, payload)
    return data


def read_all(data: bytes, budgets: list[tuple[int, int]], chunk: int, stop_at_damage: bool) -> list[Any]:
    """Everything a walk over ``data`` says: each batch's ids, position, id expected, and the
    spans reported, in order."""
    seen: list[Any] = []

    def report(span: Span, rest: bytes) -> bool:
        seen.append(("span", span, len(rest)))
        return not stop_at_damage

    hdr = len(encode_header(FileHeader(salt=SALT, first_id=1, created_ms=1, name="q")))
    reader = FileWalker(
        lambda n, off: bytes(data[off : off + n]), SALT, hdr, len(data), 1, report, chunk=chunk
    )
    for max_bytes, max_items in budgets * 50:
        batch = reader.read_batch(max_bytes, max_items, at_least_one=max_items % 2 == 0)
        seen.append(
            (
                [(type(r), r.id, r.offset, r.payload, getattr(r, "meta", None)) for r in batch],
                reader.pos,
                reader.expected,
                reader.done,
            )
        )
        if reader.done:
            break
    return seen


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.integers(0, 400), max_size=40),
    st.lists(st.tuples(st.integers(1, 5000), st.integers(1, 12)), min_size=1, max_size=4),
    st.sampled_from([64, 200, 1000, 1 << 20]),
    st.lists(
        st.tuples(st.sampled_from(["flip", "cut", "garbage", "dup"]), st.integers(0, 20000)), max_size=3
    ),
    st.booleans(),
    st.lists(st.integers(0, 2), max_size=8),
)
def test_the_walker_reads_the_same_with_the_compiled_loop_and_the_reference(
    sizes, budgets, chunk, damage, stop_at_damage, kinds
):
    data = image(sizes, 1, kinds)
    for kind, at in damage:
        at = 60 + at % max(1, len(data) - 60)
        if kind == "flip" and at < len(data):
            data[at] ^= 0x10
        elif kind == "cut":
            del data[at:]
        elif kind == "garbage":
            data[at:at] = b"\x01\x02garbage\x00" * 3
        else:
            data += data[60:at]
    compiled = read_all(bytes(data), budgets, chunk, stop_at_damage)
    saved = walker.walk_puts
    walker.walk_puts = fallback.walk_puts
    try:
        reference = read_all(bytes(data), budgets, chunk, stop_at_damage)
    finally:
        walker.walk_puts = saved
    assert compiled == reference
