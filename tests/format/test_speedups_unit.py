"""``unit_records``, the decoding of a compressed unit's inner bytes, agrees with its reference.

A compressed unit (docs/format.md section 4.5) holds ordinary PUT/PUTX records encoded as a file of
their own with the salt ``file_salt ^ unit_offset``; a reader decodes them, checks them ([F-45]:
exactly ``count`` valid PUT/PUTX records with ids ``first_id ..`` in order) and relabels each with
the unit's offset and size.  The compiled twin (format/_speedups.c, section unit_records) does it in
one pass; at anything off its fast path it hands the whole unit to the reference
(format/fallback.py), which says why the unit is damaged.  So the two must agree on every input:
units as writers make them (PUTs, PUTXs with and without metadata), damaged ones (a flipped byte, a
cut, a record too many or too few, ids out of order or off by one, a record of another type) and
arguments off the fast path.  A garbage collection inside the call that tries to resize the bytes
or reconfigures the module changes nothing.  scripts/sanitize_twins.sh runs these under
AddressSanitizer and UBSan.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journaled.format import compressed, fallback, record, speedups
from journaled.format.metadata import NO_HEADERS, Meta

try:
    from journaled.format import _speedups as native
except ImportError:  # not built: only the reference can be checked
    native = None  # type: ignore[assignment]
else:  # configured even when JOURNALED_PURE_PYTHON=1 left it unconfigured (idempotent)
    assert speedups.adopt(native) is None

needs_native = pytest.mark.skipif(native is None, reason="the compiled extension is not built")

SALT = 0x5EED1234
ADD_MS = 1_700_000_000_123
UNIT_AT = 4096  # the unit's offset in its file
UNIT_SIZE = 777  # the bytes its PUTZ record takes on disk (any number: the records take it)


def outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """What a call returned, or which exception (type and message) it raised."""
    try:
        return "ok", fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the exception itself is what is compared
        return "raised", (type(exc), str(exc))


def inner(
    specs: list[tuple[Meta | None, bytes]], first_id: int = 1, salt: int = SALT, at: int = UNIT_AT
) -> bytes:
    """The inner bytes of a unit at ``at`` of a file with ``salt``: a PUT for each ``(None,
    payload)``, a PUTX for each ``(meta, payload)``, ids from ``first_id``."""
    unit_salt = compressed.unit_salt(salt, at)
    out = bytearray()
    for i, (meta, payload) in enumerate(specs):
        if meta is None:
            out += record.encode_put(unit_salt, len(out), first_id + i, ADD_MS + i % 3, 0, payload)
        else:
            out += record.encode_putx(unit_salt, len(out), first_id + i, ADD_MS, 0, meta, payload)
    return bytes(out)


def same(*args: Any) -> tuple[str, Any]:
    """The twin's outcome, checked equal to the reference's (records compared field by field)."""
    got = outcome(native.unit_records, *args)
    want = outcome(fallback.unit_records, *args)
    assert got == want
    if got[0] == "ok" and not isinstance(got[1], str):
        assert [type(r) for r in got[1][0]] == [type(r) for r in want[1][0]]
    return got


metas = st.one_of(
    st.none(),
    st.builds(
        Meta, st.just(0), st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.none(), st.just(NO_HEADERS)
    ),
    st.builds(
        Meta,
        st.integers(0, 2**40),
        st.integers(0, 2**64 - 1),
        st.integers(0, 2**64 - 1),
        st.one_of(st.none(), st.binary(min_size=1, max_size=8)),
        st.dictionaries(st.text(min_size=1, max_size=4), st.binary(max_size=6), max_size=3),
    ),
)
specs = st.lists(st.tuples(metas, st.binary(max_size=200)), min_size=1, max_size=12)


# ------------------------------------------------------------------------------ the reference


def test_a_units_records_take_the_units_offset_and_size_and_their_payload_sums():
    raw = inner([(None, b"a" * 10), (Meta(0, 7, 1, b"k", NO_HEADERS), b"b" * 5), (None, b"")], first_id=40)
    recs, sizes = fallback.unit_records(raw, SALT, UNIT_AT, UNIT_SIZE, 40, 3)  # type: ignore[misc]
    assert [(type(r), r.offset, r.size, r.id, r.payload) for r in recs] == [
        (record.Put, UNIT_AT, UNIT_SIZE, 40, b"a" * 10),
        (record.PutX, UNIT_AT, UNIT_SIZE, 41, b"b" * 5),
        (record.Put, UNIT_AT, UNIT_SIZE, 42, b""),
    ]
    assert recs[1].meta.key == b"k"  # type: ignore[attr-defined]
    assert sizes == [0, 10, 15, 15]


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("count", "compressed unit holds 3 records, not 4"),
        ("first_id", "compressed unit holds records out of order"),
        ("swapped", "compressed unit holds records out of order"),
        ("flipped", "compressed unit holds a damaged record"),
        ("cut", "compressed unit holds a damaged record"),
        ("skippable", "compressed unit holds a record of another type"),
        ("salt", "compressed unit holds a damaged record"),
    ],
)
def test_a_unit_whose_inner_bytes_disagree_with_its_fields_is_damage_with_its_reason(case, reason):
    three = [(None, b"x" * 20)] * 3
    raw, first_id, count, salt = inner(three), 1, 3, SALT
    if case == "count":
        count = 4
    elif case == "first_id":
        first_id = 2
    elif case == "swapped":
        ids = iter([1, 3, 2])
        unit_salt = compressed.unit_salt(SALT, UNIT_AT)
        parts = bytearray()
        for _ in range(3):
            parts += record.encode_put(unit_salt, len(parts), next(ids), ADD_MS, 0, b"x" * 20)
        raw = bytes(parts)
    elif case == "flipped":
        raw = raw[:40] + bytes([raw[40] ^ 1]) + raw[41:]
    elif case == "cut":
        raw = raw[:-1]
    elif case == "skippable":
        raw = inner(three[:2]) + record.encode_record(
            compressed.unit_salt(SALT, UNIT_AT), len(inner(three[:2])), record.TYPE_SKIPPABLE | 5, b"?"
        )
    elif case == "salt":
        salt = SALT ^ 1  # the records were encoded for another file
    assert fallback.unit_records(raw, salt, UNIT_AT, UNIT_SIZE, first_id, count) == reason
    if native is not None:
        assert native.unit_records(raw, salt, UNIT_AT, UNIT_SIZE, first_id, count) == reason


# -------------------------------------------------------------------------------- the twin


@needs_native
def test_a_well_formed_unit_is_decoded_in_c_without_calling_the_reference():
    raw = inner([(None, b"p" * 50)] * 20 + [(Meta(0, 5, 1, None, NO_HEADERS), b"t")] + [
        (Meta(9, 0, 0, b"key", {"h": b"v"}), b"m")
    ])  # fmt: skip
    calls: list[int] = []

    def counted(*args: Any) -> Any:
        calls.append(1)
        return fallback.unit_records(*args)

    native.configure(**{**speedups.configure_arguments(), "unit_records": counted})
    try:
        got = native.unit_records(raw, SALT, UNIT_AT, UNIT_SIZE, 1, 22)
    finally:
        assert speedups.adopt(native) is None
    assert calls == []
    assert got == fallback.unit_records(raw, SALT, UNIT_AT, UNIT_SIZE, 1, 22)
    recs = got[0]
    # one int object of each for the whole unit (perf), equal to the unit's
    assert {id(r.offset) for r in recs} == {id(recs[0].offset)} and recs[0].offset == UNIT_AT
    assert {id(r.size) for r in recs} == {id(recs[0].size)} and recs[0].size == UNIT_SIZE


@needs_native
def test_records_of_a_unit_are_left_out_of_the_collectors_walks():
    recs = native.unit_records(inner([(None, b"a"), (None, b"b")]), SALT, UNIT_AT, UNIT_SIZE, 1, 2)[0]
    assert not any(gc.is_tracked(r) for r in recs)


@needs_native
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(specs, st.integers(0, 2**62 - 100), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
def test_the_twin_agrees_with_the_reference_on_any_well_formed_unit(units, first_id, salt, at):
    raw = inner(units, first_id, salt, at)
    got = same(raw, salt, at, UNIT_SIZE, first_id, len(units))
    assert got[0] == "ok" and not isinstance(got[1], str)


@needs_native
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs,
    st.data(),
    st.sampled_from(["flip", "cut", "append", "count", "first_id", "zeros"]),
)
def test_the_twin_agrees_with_the_reference_on_damaged_units(units, data, how):
    raw = bytearray(inner(units))
    first_id, count = 1, len(units)
    if how == "flip":
        k = data.draw(st.integers(0, len(raw) - 1))
        raw[k] ^= data.draw(st.integers(1, 255))
    elif how == "cut":
        del raw[data.draw(st.integers(0, len(raw) - 1)) :]
    elif how == "append":
        raw += data.draw(st.binary(min_size=1, max_size=60))
    elif how == "count":
        count = data.draw(st.integers(0, count + 2).filter(lambda c: c != len(units)))
    elif how == "first_id":
        first_id = data.draw(st.integers(0, 5).filter(lambda f: f != 1))
    else:
        k = data.draw(st.integers(0, len(raw) - 1))
        raw[k:] = bytes(len(raw) - k)
    same(bytes(raw), SALT, UNIT_AT, UNIT_SIZE, first_id, count)


@needs_native
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300), st.integers(0, 3))
def test_the_twin_agrees_with_the_reference_on_random_bytes(raw, count):
    same(raw, SALT, UNIT_AT, UNIT_SIZE, 1, count)


RAW = inner([(None, b"abc"), (None, b"de")], first_id=5)


@needs_native
@pytest.mark.parametrize(
    "args",
    [
        (bytearray(RAW), SALT, UNIT_AT, UNIT_SIZE, 5, 2),
        (memoryview(RAW), SALT, UNIT_AT, UNIT_SIZE, 5, 2),
        (memoryview(RAW)[::2], SALT, UNIT_AT, UNIT_SIZE, 5, 2),
        (memoryview(RAW + b"\0"[: len(RAW) % 2]).cast("H"), SALT, UNIT_AT, UNIT_SIZE, 5, 2),
        (RAW, SALT - 2**64, UNIT_AT, UNIT_SIZE, 5, 2),
        (RAW, SALT + 2**70, UNIT_AT, UNIT_SIZE, 5, 2),
        (RAW, SALT, UNIT_AT + 2**64, UNIT_SIZE, 5, 2),
        (RAW, SALT, UNIT_AT, -1, 5, 2),
        (RAW, SALT, UNIT_AT, 2**63, 5, 2),
        (RAW, SALT, UNIT_AT, UNIT_SIZE, 5 + 2**64, 2),
        (RAW, SALT, UNIT_AT, UNIT_SIZE, -3, 2),
        (RAW, SALT, UNIT_AT, UNIT_SIZE, 5, 2**62 + 1),
        (RAW, SALT, UNIT_AT, UNIT_SIZE, 5, True),
        (RAW, 1.5, UNIT_AT, UNIT_SIZE, 5, 2),
        ("text", SALT, UNIT_AT, UNIT_SIZE, 5, 2),
        (RAW, SALT, UNIT_AT, UNIT_SIZE, 5),
        (RAW, SALT, UNIT_AT, UNIT_SIZE, 5, 2, 0),
        (None, SALT, UNIT_AT, UNIT_SIZE, 5, 2),
    ],
)
def test_arguments_off_the_fast_path_get_the_references_answer(args):
    same(*args)


@needs_native
def test_keyword_arguments_get_the_references_answer():
    kw = {"raw": RAW, "salt": SALT, "offset": UNIT_AT, "size": UNIT_SIZE, "first_id": 5, "count": 2}
    assert outcome(native.unit_records, **kw) == outcome(fallback.unit_records, **kw)


# ---------------------------------------------------------------------- Python code inside the call


def collect_amid(action: Callable[[], None], nth: int, *args: Any) -> Any:
    """``native.unit_records(*args)`` with ``action`` run by the first collection that starts
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
        return native.unit_records(*args)
    finally:
        gc.set_threshold(*old)
        gc.callbacks.remove(callback)


@needs_native
@pytest.mark.parametrize("nth", [1, 2, 7])
def test_a_collection_that_tries_to_resize_the_bytes_changes_nothing(nth):
    """The twin holds the buffer's view for the whole call: a bytearray cannot be resized under
    it, and the records are the original's (or the reference's answer for the emptied bytes when
    the collection came before the call)."""
    original = inner([(None, b"z" * 40)] * 30)
    buf = bytearray(original)
    refused: list[type[BaseException]] = []

    def resize() -> None:
        try:
            buf.clear()
        except BufferError as exc:
            refused.append(type(exc))

    got = collect_amid(resize, nth, buf, SALT, UNIT_AT, UNIT_SIZE, 1, 30)
    seen = original if refused == [BufferError] or buf else b""
    assert got == fallback.unit_records(seen, SALT, UNIT_AT, UNIT_SIZE, 1, 30)


@needs_native
@pytest.mark.parametrize("nth", [1, 3])
def test_a_collection_that_reconfigures_the_module_mid_call_changes_nothing(nth):
    """A damaged unit is handed to the reference after Python code replaced it (the new one
    answers), and the records built before are the configured classes'."""
    calls: list[int] = []

    def counting(*args: Any) -> Any:
        calls.append(1)
        return fallback.unit_records(*args)

    raw = inner([(None, b"r" * 30)] * 20) + b"\x07" * 20

    def reconfigure() -> None:
        native.configure(**{**speedups.configure_arguments(), "unit_records": counting})

    try:
        got = collect_amid(reconfigure, nth, raw, SALT, UNIT_AT, UNIT_SIZE, 1, 20)
    finally:
        assert speedups.adopt(native) is None
    assert got == "compressed unit holds a damaged record"
    assert calls == [1]
