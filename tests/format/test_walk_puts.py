"""``walk_puts``, the record walker's per-record loop, agrees with its reference value for value.

The compiled twin walks well-formed PUTs itself and hands everything else to the reference
(format/fallback.py) from there on, so the two must agree on every buffer: whole journals, journals
cut anywhere, with flipped bytes, garbage, zero-filled tails, ids at the edges of the fast path, and
on every budget (``max_items``, ``max_bytes``, ``nbytes``, ``first_free``), including arguments of
unexpected types and numbers past the C integer types.  A garbage collection inside the call that
tries to resize the buffer or reconfigures the module changes nothing.  scripts/sanitize_twins.sh
runs these under AddressSanitizer and UBSan.
"""

from __future__ import annotations

import gc
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

pytestmark = pytest.mark.skipif(native is None, reason="the compiled extension is not built")

SALT = 0x5EED
INDEX_MAX = 2**62
BIG = 1 << 30


def journal(payloads: list[bytes], first_id: int = 1, salt: int = SALT, base: int = 0) -> bytes:
    out = bytearray()
    fallback.encode_puts(salt, base, first_id, 1_700_000_000_123, 0, payloads, out)
    return bytes(out)


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except Exception as exc:  # noqa: BLE001 - the exception itself is what is compared
        return "raised", (type(exc), str(exc))


def same(*args: Any) -> tuple[str, Any]:
    got = outcome(native.walk_puts, *args)
    want = outcome(fallback.walk_puts, *args)
    assert got == want  # Put and Damage are attrs classes: compared field by field
    return got


def test_a_clean_window_gives_every_put_and_ends_on_the_boundary():
    buf = journal([b"a" * 10, b"", b"c" * 300], base=4096)
    puts, pos, expected, nbytes, full, end, damage = same(buf, 4096, SALT, 0, 1, BIG, BIG, 0, True)[1]
    assert [p.id for p in puts] == [1, 2, 3] and [p.offset for p in puts] == [4096, 4139, 4172]
    assert (pos, expected, nbytes, full, end, damage) == (len(buf), 4, 310, False, len(buf), None)


def test_the_budget_stops_before_the_put_that_does_not_fit_but_the_first_is_free():
    buf = journal([b"a" * 100] * 3)
    step = 100 + record.PUT_OVERHEAD
    assert same(buf, 0, SALT, 0, 1, BIG, 150, 0, True)[1][1:] == (2 * 0 + step, 2, 100, True, step, None)
    assert same(buf, 0, SALT, 0, 1, BIG, 50, 0, False)[1] == ([], 0, 1, 0, True, 0, None)
    # a budget already spent by earlier windows counts
    assert same(buf, 0, SALT, 0, 1, BIG, 250, 100, False)[1][3:5] == (200, True)


def test_puts_below_the_expected_id_are_walked_over_and_counted_against_max_items():
    buf = journal([b"x"] * 6, first_id=10)
    puts, pos, expected, *_ = same(buf, 0, SALT, 0, 13, 4, BIG, 0, True)[1]
    assert [p.id for p in puts] == [13] and expected == 14 and pos == 4 * (1 + record.PUT_OVERHEAD)


def test_damage_and_a_cut_record_are_reported_as_decode_many_does():
    buf = bytearray(journal([b"p" * 50] * 4))
    buf[2 * 83 + 40] ^= 0xFF  # the third record's payload
    _, (puts, pos, _, _, full, end, damage) = same(bytes(buf), 0, SALT, 0, 1, BIG, BIG, 0, True)
    assert [p.id for p in puts] == [1, 2] and pos == end == 166 and not full
    assert isinstance(damage, record.Damage) and "CRC" in damage.reason.upper()
    cut = same(bytes(buf[:100]), 0, SALT, 0, 1, BIG, BIG, 0, True)[1]
    assert cut[6] is not None and cut[6].incomplete and cut[1] == 83


@pytest.mark.parametrize("first_id", [INDEX_MAX - 2, INDEX_MAX, 2**64 - 3])
def test_ids_at_and_past_the_fast_paths_edge_go_the_references_way(first_id):
    buf = journal([b"q"] * 3, first_id=first_id)
    puts = same(buf, 0, SALT, 0, 0, BIG, BIG, 0, True)[1][0]
    assert [p.id for p in puts] == [first_id, first_id + 1, first_id + 2]


class IndexOne:
    def __index__(self) -> int:
        return 1


@pytest.mark.parametrize(
    "args",
    [
        (bytearray(journal([b"b"] * 3)), 0, SALT, 0, 1, BIG, BIG, 0, True),
        (memoryview(journal([b"b"] * 3)), 0, SALT, 0, 1, BIG, BIG, 0, True),
        (journal([b"b"] * 3), 0, SALT, 0, 1, BIG, BIG, 0, 1),
        (journal([b"b"] * 3), 0, SALT, 0, 1, BIG, BIG, 0, None),
        (journal([b"b"] * 3), 0, SALT, 0, True, BIG, BIG, 0, True),
        (journal([b"b"] * 3), 0, SALT, IndexOne(), 1, BIG, BIG, 0, True),
        (journal([b"b"] * 3), 0, -1, 0, 1, BIG, BIG, 0, True),
        (journal([b"b"] * 3), 0, 2**80 + SALT, 0, 1, BIG, BIG, 0, True),
        (journal([b"b"] * 3), 2**63, SALT, 0, 1, BIG, BIG, 0, True),
        (journal([b"b"] * 3), 0, SALT, 0, 1, 2**64, 2**70, 2**66, False),
        (journal([b"b"] * 3), 0, SALT, 10**6, 1, BIG, BIG, 0, True),
        (journal([b"b"] * 3), 0, SALT, 0, -5, -1, -1, -1, True),
        (b"", 0, SALT, 0, 1, BIG, BIG, 0, True),
        ("not bytes", 0, SALT, 0, 1, BIG, BIG, 0, True),
        (journal([b"b"] * 3), 0, SALT, 0, 1, 0, BIG, 0, True),
    ],
    ids=[
        "bytearray",
        "memoryview",
        "int-flag",
        "none-flag",
        "bool-id",
        "index-pos",
        "negative-salt",
        "huge-salt",
        "huge-base",
        "huge-budgets",
        "pos-past-end",
        "negative-numbers",
        "empty",
        "str",
        "no-items",
    ],
)
def test_arguments_off_the_fast_path_get_the_references_answer(args):
    same(*args)


def test_the_reference_refuses_what_it_refuses_and_the_twin_raises_the_same():
    assert same(journal([b"b"]), 0, SALT)[0] == "raised"  # too few arguments
    with pytest.raises(TypeError):
        native.walk_puts(journal([b"b"]), 0, SALT, 0, 1, BIG, BIG, 0, True, extra=1)


@st.composite
def damaged_journals(draw: st.DrawFn) -> tuple[bytes, int]:
    sizes = draw(st.lists(st.integers(0, 300), max_size=25))
    first_id = draw(st.sampled_from([1, 1000, INDEX_MAX - 5, 2**64 - 30]))
    base = draw(st.sampled_from([0, 4096, 2**40]))
    buf = bytearray(journal([bytes([i % 251]) * n for i, n in enumerate(sizes)], first_id, SALT, base))
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["flip", "garbage", "zeros", "cut", "dup"]))
        at = draw(st.integers(0, len(buf)))
        if kind == "flip" and buf:
            buf[min(at, len(buf) - 1)] ^= 1 << draw(st.integers(0, 7))
        elif kind == "garbage":
            buf[at:at] = draw(st.binary(max_size=64))
        elif kind == "zeros":
            buf[at:] = bytes(draw(st.integers(0, 80)))
        elif kind == "cut":
            del buf[at:]
        elif kind == "dup":  # an older stretch again: ids below the expected one
            buf += buf[: draw(st.integers(0, len(buf)))]
    return bytes(buf), base


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    damaged_journals(),
    st.integers(0, 200),
    st.sampled_from([0, 1, 5, 999, 1000, INDEX_MAX - 3, 2**64 - 20, 2**64 + 1]),
    st.integers(0, 30) | st.just(BIG),
    st.integers(0, 3000) | st.just(BIG),
    st.integers(0, 400),
    st.booleans(),
)
def test_the_twin_agrees_with_the_reference_on_any_journal_and_budget(
    case, pos, expected, max_items, max_bytes, nbytes, first_free
):
    buf, base = case
    same(buf, base, SALT, pos, expected, max_items, max_bytes, nbytes, first_free)
    same(bytearray(buf), base, SALT, pos, expected, max_items, max_bytes, nbytes, first_free)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=600), st.integers(0, 50), st.booleans())
def test_the_twin_agrees_with_the_reference_on_random_bytes(buf, pos, first_free):
    same(buf, 0, SALT, pos, 0, BIG, 500, 0, first_free)


# ---------------------------------------------------------------------- Python code inside the call


def collect_amid(action: Any, nth: int, *args: Any) -> Any:
    """``native.walk_puts(*args)`` with ``action`` run by the first collection that starts
    inside it (the threshold set to ``nth`` allocations right after a full collection)."""
    armed = [True]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and armed:
            armed.clear()
            action()

    old = gc.get_threshold()
    gc.callbacks.append(callback)
    try:
        gc.collect()
        gc.set_threshold(nth)
        return native.walk_puts(*args)
    finally:
        gc.set_threshold(*old)
        gc.callbacks.remove(callback)


@pytest.mark.parametrize("nth", [1, 2, 7])
def test_a_collection_that_tries_to_resize_the_buffer_changes_nothing(nth):
    """The twin holds the buffer's view for the whole call: a bytearray cannot be resized under
    it (the resize raises BufferError in the code that tries), and the records are the original's
    (all of them, or none when the collection came before the call)."""
    original = journal([b"z" * 40] * 30)
    buf = bytearray(original)
    refused: list[type[BaseException]] = []

    def resize() -> None:
        try:
            buf.clear()
        except BufferError as exc:
            refused.append(type(exc))

    got = collect_amid(resize, nth, buf, 0, SALT, 0, 1, BIG, BIG, 0, True)
    # a collection before the call (in the caller's own allocations) empties it: then no records
    seen = original if refused == [BufferError] or buf else b""
    assert got == fallback.walk_puts(seen, 0, SALT, 0, 1, BIG, BIG, 0, True)


@pytest.mark.parametrize("nth", [1, 3])
def test_a_collection_that_reconfigures_the_module_mid_walk_changes_nothing(nth):
    """The damage at the end is handed to the reference after Python code replaced it."""
    calls: list[int] = []

    def counting(*args: Any) -> Any:
        calls.append(1)
        return fallback.walk_puts(*args)

    buf = journal([b"r" * 30] * 20) + b"\x07" * 20

    def reconfigure() -> None:
        native.configure(
            constants=speedups.layout(),
            put_type=record.Put,
            put_fields=("offset", "size", "id", "add_ms", "expire_ms", "payload"),
            putx_type=record.PutX,
            putx_fields=("offset", "size", "id", "add_ms", "expire_ms", "payload", "meta"),
            meta_type=Meta,
            meta_fields=("not_before_ms", "producer", "sequence", "key", "headers"),
            no_headers=NO_HEADERS,
            damage_type=record.Damage,
            encode_puts=fallback.encode_puts,
            decode_many=fallback.decode_many,
            decode_one=record.decode_one,
            decode_columns=fallback.decode_columns,
            walk_puts=counting,
        )

    try:
        got = collect_amid(reconfigure, nth, buf, 0, SALT, 0, 1, BIG, BIG, 0, True)
    finally:
        assert speedups.adopt(native) is None
    assert got == fallback.walk_puts(buf, 0, SALT, 0, 1, BIG, BIG, 0, True)


def test_a_reference_that_returns_something_else_is_refused():
    def wrong(*args: Any) -> Any:
        return ("not", "a", "walk")

    args = dict(
        constants=speedups.layout(),
        put_type=record.Put,
        put_fields=("offset", "size", "id", "add_ms", "expire_ms", "payload"),
        putx_type=record.PutX,
        putx_fields=("offset", "size", "id", "add_ms", "expire_ms", "payload", "meta"),
        meta_type=Meta,
        meta_fields=("not_before_ms", "producer", "sequence", "key", "headers"),
        no_headers=NO_HEADERS,
        damage_type=record.Damage,
        encode_puts=fallback.encode_puts,
        decode_many=fallback.decode_many,
        decode_one=record.decode_one,
        decode_columns=fallback.decode_columns,
    )
    with pytest.raises(TypeError, match="must be callable"):
        native.configure(**args, walk_puts=None)
    native.configure(**args, walk_puts=wrong)
    try:
        with pytest.raises(TypeError, match="7-tuple"):
            native.walk_puts(journal([b"a"]) + b"\x01", 0, SALT, 0, 1, BIG, BIG, 0, True)
    finally:
        assert speedups.adopt(native) is None
    same(journal([b"a"]) + b"\x01", 0, SALT, 0, 1, BIG, BIG, 0, True)


# ---------------------------------------------------------------------- what the collector sees


def test_records_and_items_of_plain_values_are_left_out_of_the_collectors_walks():
    """Read-behind builds a record and an item per journal record; holding only ints, floats,
    bytes and None, they cannot be in a cycle, and the collector need not walk them."""
    _, _, items_from_puts = (
        speedups.item_twins(item.Item, item.MetaItem) if speedups.native else (None, None, None)
    )
    puts = native.walk_puts(journal([b"a", b"b"]), 0, SALT, 0, 1, BIG, BIG, 0, True)[0]
    assert [gc.is_tracked(p) for p in puts] == [False, False]
    if items_from_puts is not None:
        items = items_from_puts(puts, {1: 2}, BIG, 200)[0]
        assert [gc.is_tracked(i) for i in items] == [False, False]
        odd = items_from_puts(puts, {1: [3]}, BIG, 200)[0]  # an error count that is a container
        assert [gc.is_tracked(i) for i in odd] == [True, False]


def test_items_made_for_a_put_are_left_out_of_the_collectors_walks_too():
    """Every put makes an item for each reader; of plain values, it is not walked either, and one
    that holds a container still is (a cycle through it must stay collectable)."""
    if speedups.native is None:
        pytest.skip("the references run here: their items are ordinary objects")
    new_item, new_items, _ = speedups.item_twins(item.Item, item.MetaItem)
    assert not gc.is_tracked(new_item(1, b"a", 1.5, None, 0))
    assert [gc.is_tracked(i) for i in new_items(1, [b"a", b"b"], 1.5, None)] == [False, False]
    assert gc.is_tracked(new_item(1, b"a", 1.5, None, [0]))
