"""The compiled twins and their pure-Python references are interchangeable, and one switch picks.

``journaled.format._speedups`` (C) is the twin of format/fallback.py's references
(``encode_puts``, ``decode_many``, ``decode_columns`` and the item builders): the same bytes out
of an encode, the same records, end position and damage out of a decode, the same exception for
the same bad input -- checked here with hypothesis on random batches, random bytes and damaged
journals.  ``journaled.format.speedups`` alone imports the extension: it refuses a stale build
(``ABI_VERSION``) and one whose layout constants differ from format/record.py's, and
``JOURNALED_PURE_PYTHON=1`` selects the references; it says which one runs.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import types
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journaled import item
from journaled.format import fallback, record, speedups
from journaled.format.metadata import NO_HEADERS, Meta
from journaled.format.record import MAX_BODY, PUT_OVERHEAD
from support.paths import ROOT

py_encode_puts = fallback.encode_puts
py_decode_many = fallback.decode_many
py_decode_columns = fallback.decode_columns
py_new_item, py_new_items, py_items_from_puts = fallback.item_references(item.Item, item.MetaItem)

try:
    from journaled.format import _speedups as native
except ImportError:  # not built here: only the selection tests can run
    native = None  # type: ignore[assignment]
else:  # compared even when JOURNALED_PURE_PYTHON=1 left it unconfigured (configuring is idempotent)
    assert speedups.adopt(native) is None
    native.configure_items(
        item_type=item.Item,
        item_fields=fallback.ITEM_FIELDS,
        new_item=py_new_item,
        new_items=py_new_items,
        items_from_puts=py_items_from_puts,
    )

needs_native = pytest.mark.skipif(native is None, reason="the compiled extension is not built")

u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
payloads = st.lists(st.binary(max_size=300), max_size=12)


def outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """What a call returned, or which exception (type and message) it raised."""
    try:
        return "ok", fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the exception itself is what is compared
        return "raised", (type(exc), str(exc))


def journal(salt: int, base: int, first_id: int, batch: list[bytes], expire_ms: int = 0) -> bytes:
    out = bytearray()
    py_encode_puts(salt, base, first_id, 1_700_000_000_000, expire_ms, batch, out)
    return bytes(out)


# ------------------------------------------------------------------------------------ encoding


@needs_native
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(u32, st.integers(0, 2**40), u64, u64, u64, payloads, st.binary(max_size=20))
def test_encode_puts_writes_the_same_bytes_and_offsets(
    salt, offset, first_id, add_ms, expire_ms, batch, prefix
):
    """Byte-identical journals, also appended after bytes already in the buffer and for ids and
    times at the edges of their fields (where the reference raises part-way, so must the twin)."""
    a, b = bytearray(prefix), bytearray(prefix)
    assert outcome(native.encode_puts, salt, offset, first_id, add_ms, expire_ms, batch, a) == outcome(
        py_encode_puts, salt, offset, first_id, add_ms, expire_ms, batch, b
    )
    assert a == b


@needs_native
@pytest.mark.parametrize(
    "args",
    [
        (1, 0, 2**64 - 1, 0, 0, [b"a", b"b"]),  # the second id does not fit: raises after one record
        (1, 0, -1, 0, 0, [b"a"]),
        (1, 0, 0, 2**64, 0, [b"a"]),
        (1, 0, 0, 0, -5, [b"a"]),
        (1, 0, 0, 0, 0, [b"ok", "text"]),  # not bytes
        (1, 0, 0, 0, 0, [b"ok", None]),
        (1, 0, 0, 0, 0, [bytearray(b"ba"), memoryview(b"mv")]),  # other buffers: as the reference does
        (-3, 2**70, 5, 0, 0, (b"x",)),  # numbers the reference masks
        (1.5, 0, 0, 0, 0, [b"a"]),
        (1, 0, 0, 0, 0, 5),
    ],
)
def test_encode_puts_fails_or_succeeds_exactly_as_the_reference(args):
    a, b = bytearray(b"head"), bytearray(b"head")
    assert outcome(native.encode_puts, *args, a) == outcome(py_encode_puts, *args, b)
    assert a == b


@needs_native
def test_encode_puts_refuses_an_output_that_is_not_a_bytearray_as_the_reference_does():
    assert outcome(native.encode_puts, 1, 0, 0, 0, 0, [b"a"], b"") == outcome(
        py_encode_puts, 1, 0, 0, 0, 0, [b"a"], b""
    )


@needs_native
@settings(max_examples=200)
@given(st.binary(max_size=5000), st.integers(0, 2**32 - 1))
def test_the_twins_crc32c_is_the_crc32c_packages(data, seed):
    """The CRC is the C code's own (hardware or table): each record's stored CRC must equal the
    crc32c package's over the same bytes and seed."""
    from crc32c import crc32c

    out = bytearray()
    native.encode_puts(seed, 0, 1, 2, 3, [data], out)
    assert int.from_bytes(out[:4], "little") == crc32c(bytes(out[4:]), seed)


# ------------------------------------------------------------------------------------ decoding


def assert_same_decode(buf: Any, *args: Any, **kwargs: Any) -> None:
    got = outcome(native.decode_many, buf, *args, **kwargs)
    want = outcome(py_decode_many, buf, *args, **kwargs)
    assert got == want
    if got[0] == "ok":
        assert [type(r) for r in got[1][0]] == [type(r) for r in want[1][0]]
        assert all(type(r.payload) is bytes for r in got[1][0] if isinstance(r, record.Put))


@st.composite
def damaged_journals(draw: Any) -> tuple[bytes, int, int]:
    """A valid run of records, then cut, flipped, zeroed, overwritten or extended."""
    salt = draw(u32)
    base = draw(st.integers(0, 2**33))
    buf = bytearray(journal(salt, base, draw(st.integers(0, 2**40)), draw(payloads), draw(u64)))
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["cut", "flip", "zero", "garbage", "append", "skippable", "unknown"]))
        at = draw(st.integers(0, len(buf)))
        if kind == "cut":
            del buf[at:]
        elif kind == "flip" and at < len(buf):
            buf[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "zero":
            buf[at : at + draw(st.integers(1, 40))] = bytes(draw(st.integers(1, 40)))
        elif kind == "garbage":
            buf[at:at] = draw(st.binary(min_size=1, max_size=40))
        elif kind == "append":
            buf += journal(salt, base + len(buf), draw(st.integers(0, 2**63)), draw(payloads))
        elif kind in ("skippable", "unknown"):
            rtype = draw(st.integers(0x80, 0xFF) if kind == "skippable" else st.integers(2, 0x7F))
            buf += record.encode_record(salt, base + len(buf), rtype, draw(st.binary(max_size=30)))
    return bytes(buf), base, salt


@needs_native
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    damaged_journals(),
    st.integers(0, 40),
    st.none() | st.integers(-1, 15),
    st.sampled_from([bytes, bytearray, memoryview]),
)
def test_decode_many_returns_the_same_records_end_and_damage(case, pos, limit, kind):
    """Item for item and error for error (UnsupportedVersion on an unknown type included),
    whatever the buffer type, start position and limit."""
    buf, base, salt = case
    assert_same_decode(kind(buf), base, salt, pos, MAX_BODY, limit=limit)
    assert_same_decode(kind(buf), base, salt)


@needs_native
@settings(max_examples=300)
@given(st.binary(max_size=200), st.integers(0, 2**40), u32, st.integers(0, 300))
def test_decode_many_agrees_on_random_bytes(buf, base, salt, max_body):
    assert_same_decode(buf, base, salt, 0, max_body)


@needs_native
@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((0, 1, -1), {}),  # negative start: the reference's semantics, whatever they are
        ((2**70, 1), {}),
        ((0, -7), {}),
        ((0, None), {}),
        ((0, 1, 0, 2**80), {}),
        ((0, 1, 0, MAX_BODY, 2**80), {}),
        ((0, 1), {"pos": 3}),
        ((0, 1), {"limit": "many"}),
        ((0, 1, 0, MAX_BODY, 2), {}),
        ((0,), {}),
    ],
)
def test_decode_many_odd_arguments_behave_as_the_reference(args, kwargs):
    buf = journal(1, 0, 10, [b"a" * 40, b"b", b"c" * 7])
    assert_same_decode(buf, *args, **kwargs)
    assert_same_decode(memoryview(buf).cast("B", (len(buf),)), *args, **kwargs)


@needs_native
def test_decode_many_handles_multibyte_memoryviews_as_the_reference():
    buf = journal(1, 0, 10, [b"a" * 3, b"b"])
    buf += bytes(-len(buf) % 4)
    assert_same_decode(memoryview(buf).cast("I"), 0, 1)


@needs_native
def test_decoded_records_are_ordinary_puts():
    buf = journal(7, 100, 42, [b"hello", b""])
    recs, end, damage = native.decode_many(buf, 100, 7)
    assert damage is None and end == len(buf)
    assert recs == [
        record.Put(100, PUT_OVERHEAD + 5, 42, 1_700_000_000_000, 0, b"hello"),
        record.Put(100 + PUT_OVERHEAD + 5, PUT_OVERHEAD, 43, 1_700_000_000_000, 0, b""),
    ]
    assert hash(recs[0]) == hash(record.Put(100, PUT_OVERHEAD + 5, 42, 1_700_000_000_000, 0, b"hello"))


# ------------------------------------------------------------------------------------ items


def item_fields(items: Any) -> Any:
    if items[0] != "ok":
        return items
    return "ok", [(type(i), i.id, i.data, i.add_time, i.expire_at, i.error_count) for i in items[1]]


@needs_native
@settings(max_examples=200)
@given(
    st.integers(0, 2**62),
    st.lists(st.binary(max_size=50), max_size=20),
    st.floats(allow_nan=False),
    st.none() | st.floats(allow_nan=False),
)
def test_new_items_builds_the_same_items(first_id, batch, add_time, expire_at):
    got = native.new_items(first_id, batch, add_time, expire_at)
    want = py_new_items(first_id, batch, add_time, expire_at)
    assert item_fields(("ok", got)) == item_fields(("ok", want))
    assert got == want and all(a.data is b.data for a, b in zip(got, want))


@needs_native
@pytest.mark.parametrize(
    "args",
    [
        (2**64, [b"a"], 1.0, None),
        (-5, [b"a"], 1.0, None),
        (0, (b"a", b"b"), 1.0, 2.0),
        (0, 5, 1.0, None),
        (1.5, [b"a"], 1.0, None),
        (0, [b"a", "not bytes"], 1.0, None),
    ],
)
def test_new_items_odd_arguments_behave_as_the_reference(args):
    assert item_fields(outcome(native.new_items, *args)) == item_fields(outcome(py_new_items, *args))


@needs_native
@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((1, b"a", 2.0), {}),
        ((1, b"a", 2.0, 3.0), {}),
        ((1, b"a", 2.0, None, 4), {}),
        ((1, b"a"), {}),
        ((1, b"a", 2.0), {"error_count": 2}),
        ((1, b"a", 2.0, None, 0, 9), {}),
        ((), {"id": 1, "data": b"", "add_time": 0.0}),
    ],
)
def test_new_item_builds_the_same_item_or_error(args, kwargs):
    got, want = outcome(native.new_item, *args, **kwargs), outcome(py_new_item, *args, **kwargs)
    if got[0] == "ok":
        got, want = ("ok", [got[1]]), ("ok", [want[1]])
    assert item_fields(got) == item_fields(want)


@st.composite
def decoded_puts(draw: Any) -> list[record.Put]:
    """Puts as the record walker returns them: any ids (gaps, repeats), sizes, times, expiries."""
    out = []
    for _ in range(draw(st.integers(0, 15))):
        payload = draw(st.binary(max_size=60))
        out.append(
            record.Put(
                draw(st.integers(0, 2**40)),
                len(payload) + PUT_OVERHEAD,
                draw(st.integers(0, 2**62)),
                draw(st.integers(0, 2**53 + 5)),
                draw(st.sampled_from([0, 1, 2**53 + 3]) | st.integers(0, 2**44)),
                payload,
            )
        )
    return out


@needs_native
@settings(max_examples=300)
@given(
    decoded_puts(),
    st.dictionaries(st.integers(0, 20), st.integers(0, 9), max_size=5),
    st.integers(0, 2000),
    st.integers(0, 300),
)
def test_items_from_puts_builds_the_same_items_and_stops_at_the_same_record(recs, errors, want, overhead):
    for rec in recs[:3]:  # some of the error counts name ids that are there
        errors.setdefault(rec.id, 1)
    got = native.items_from_puts(recs, errors, want, overhead)
    ref = py_items_from_puts(recs, errors, want, overhead)
    assert item_fields(("ok", got[0])) == item_fields(("ok", ref[0]))
    assert got[1:] == ref[1:]
    assert all(a.data is r.payload for a, r in zip(got[0], recs))


@needs_native
@pytest.mark.parametrize(
    "args",
    [
        ([], {}, 10, 0),
        ((record.Put(0, 34, 1, 5, 0, b"a"),), {}, 10, 0),
        ([record.Put(0, 34, 1, 5, 0, b"a")], {1: 2}, -1, 0),
        ([record.Put(0, 34, 1, 5.5, 0, b"a")], {}, 10, 0),
        ([record.Put(0, 34, 1, 5, 0, bytearray(b"a"))], {}, 10, 0),
        (["not a put"], {}, 10, 0),
        ([record.Put(0, 34, 2**70, 5, 0, b"a")], {}, 10, 200),
        ([record.Put(0, 34, 1, 5, 0, b"a")], {}, 2**70, 0),
    ],
)
def test_items_from_puts_odd_arguments_behave_as_the_reference(args):
    got, ref = outcome(native.items_from_puts, *args), outcome(py_items_from_puts, *args)
    if got[0] == "ok" and ref[0] == "ok":
        assert item_fields(("ok", got[1][0])) == item_fields(("ok", ref[1][0])) and got[1][1:] == ref[1][1:]
    else:
        assert got == ref


# ------------------------------------------------------------------------------------ columnar decoding


def same_columns(buf: Any, *args: Any, prefill: list[bytes] | None = None) -> tuple[str, Any]:
    """Both twins of decode_columns on copies of the same output columns: the same return value
    (or exception) and the same bytes appended."""
    start = prefill if prefill is not None else [b"", b"", b"", bytes(4), b""]
    outs = [[bytearray(c) for c in start] for _ in range(2)]
    got = outcome(native.decode_columns, buf, *args, outs[0])
    want = outcome(py_decode_columns, buf, *args, outs[1])
    assert got == want
    assert outs[0] == outs[1]
    return got


@needs_native
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    damaged_journals(),
    st.integers(0, 60),
    st.integers(0, 2**41),
    st.integers(0, 2**41),
    st.integers(0, 2**34),
    st.integers(0, 20),
    st.integers(0, 400),
    st.lists(st.binary(max_size=24), min_size=5, max_size=5),
)
def test_decode_columns_appends_the_same_rows_and_stops_alike(
    case, pos, lo, hi, end_offset, max_rows, max_bytes, prefill
):
    """Random records, damaged (flipped, cut, zeroed, garbage, other record types) or not, with
    random id range, segment end, row and byte budgets, and columns that already hold bytes."""
    buf, base, salt = case
    same_columns(buf, base, salt, pos, lo, hi, end_offset, max_rows, max_bytes, prefill=prefill)
    same_columns(buf, base, salt, 0, 0, 2**62, 2**62, 1 << 20, 1 << 30)


@needs_native
@settings(max_examples=300)
@given(st.binary(max_size=300), st.integers(0, 2**40), u32)
def test_decode_columns_agrees_on_random_bytes(buf, base, salt):
    same_columns(buf, base, salt, 0, 0, 2**62, 2**62, 100, 1000)


@needs_native
@settings(max_examples=200)
@given(st.integers(0, 2**32), u32, st.integers(0, 2**40), payloads, u64)
def test_decode_columns_rows_are_the_records_decode_many_returns(base, salt, first_id, batch, expire_ms):
    """Undamaged records: the columns hold exactly decode_many's PUTs, as Arrow's buffers."""
    import struct

    buf = journal(salt, base, first_id, batch, expire_ms)
    out = [bytearray(), bytearray(), bytearray(), bytearray(4), bytearray()]
    end, last, status = native.decode_columns(buf, base, salt, 0, 0, 2**62, 2**62, 1 << 20, 1 << 30, out)
    recs = py_decode_many(buf, base, salt)[0]
    assert (end, status) == (len(buf), 0)
    assert last == (recs[-1].id if recs else None)
    n = len(recs)
    assert list(struct.unpack(f"<{n}Q", out[0])) == [r.id for r in recs]
    assert list(struct.unpack(f"<{n}Q", out[1])) == [r.add_ms for r in recs]
    assert list(struct.unpack(f"<{n}Q", out[2])) == [r.expire_ms for r in recs]
    ends = struct.unpack(f"<{n + 1}i", out[3])
    assert [bytes(out[4][a:b]) for a, b in zip(ends, ends[1:])] == [r.payload for r in recs]


@needs_native
@pytest.mark.parametrize(
    "args",
    [
        (0, 1, -1, 0, 2**62, 2**62, 10, 100),  # negative start: as the reference does
        (0, 1, 0, 0, 2**64, 2**62, 10, 100),  # an id bound beyond the fast path's range
        (0, 1, 0, 0, 2**62, 2**62, 10, 2**31),  # a byte budget Arrow's int32 offsets cannot hold
        (0, 1, 0, 0, 2**62, 2**62, -1, 100),
        (0, 1.5, 0, 0, 2**62, 2**62, 10, 100),
        (0, -3, 0, 0, 2**62, 2**62, 10, 100),  # a salt the reference masks
        (0, 1, 0, 11, 12, 2**62, 10, 100),  # only the second record
        (0, 1, 0, 0, 2**62, 44, 10, 100),  # the segment ends after the first record
        (0, 1, 0, 0, 2**62, 2**62, 2, 100),
        (0, 1, 0, 0, 2**62, 2**62, 10, 1),
    ],
)
def test_decode_columns_odd_arguments_behave_as_the_reference(args):
    buf = journal(1, 0, 10, [b"a" * 40, b"b", b"c" * 7])
    same_columns(buf, *args)
    same_columns(bytearray(buf), *args)
    same_columns(memoryview(buf), *args)


@needs_native
def test_decode_columns_with_one_bytearray_for_several_columns_appends_as_the_reference():
    buf = journal(1, 0, 10, [b"a", b"bc"])
    a, b = bytearray(b"x"), bytearray(b"x")
    assert outcome(native.decode_columns, buf, 0, 1, 0, 0, 2**62, 2**62, 10, 100, [a] * 5) == outcome(
        py_decode_columns, buf, 0, 1, 0, 0, 2**62, 2**62, 10, 100, [b] * 5
    )
    assert a == b


@needs_native
@pytest.mark.parametrize("out", [[bytearray()] * 4, (bytearray(),) * 5, [b""] * 5, None])
def test_decode_columns_refuses_odd_outputs_as_the_reference_does(out):
    buf = journal(1, 0, 10, [b"a", b"b"])
    args = (buf, 0, 1, 0, 0, 2**62, 2**62, 10, 100, out)
    assert outcome(native.decode_columns, *args) == outcome(py_decode_columns, *args)


# ------------------------------------------------------------------------------------ selection


def _selected(env: dict[str, str]) -> str:
    code = (
        "from journaled import item; from journaled.format import record, speedups; "
        "print(speedups.implementation, type(speedups.decode_many).__name__, "
        "type(speedups.encode_puts).__name__, "
        "type(item.new_item).__name__)"
    )
    full = {**os.environ, **env, "PYTHONPATH": ROOT}
    return subprocess.run(
        [sys.executable, "-c", code], env=full, check=True, capture_output=True, text=True
    ).stdout


def test_journaled_pure_python_forces_the_reference():
    assert _selected({"JOURNALED_PURE_PYTHON": "1"}).split() == [
        "pure-python",
        "function",
        "function",
        "function",
    ]
    assert (
        "JOURNALED_PURE_PYTHON=1" in speedups.describe()
        or speedups.implementation == "compiled"
        or native is None
    )


@needs_native
def test_the_compiled_path_is_used_when_built_and_not_forced_off():
    env = {"JOURNALED_PURE_PYTHON": "0"}
    assert _selected(env).split() == ["compiled"] + ["builtin_function_or_method"] * 3


def test_speedups_says_which_implementation_runs_in_this_process():
    if speedups.implementation == "compiled":
        assert speedups.encode_puts is speedups.native.encode_puts  # type: ignore[union-attr]
        assert item.new_items is speedups.native.new_items  # type: ignore[union-attr]
        assert speedups.decode_columns is speedups.native.decode_columns  # type: ignore[union-attr]
        assert speedups.describe().startswith("compiled")
    else:
        assert speedups.encode_puts is fallback.encode_puts and speedups.decode_many is fallback.decode_many
        assert speedups.decode_columns is fallback.decode_columns
        assert item.new_items.__qualname__ == "item_references.<locals>.new_items"
        assert speedups.describe().startswith("pure Python")


def _cli(*args: str, env: dict[str, str] | None = None) -> str:
    full = {**os.environ, **(env or {}), "PYTHONPATH": ROOT}
    return subprocess.run(
        [sys.executable, "-m", "journaled", *args], env=full, check=True, capture_output=True, text=True
    ).stdout


def test_journaled_stat_prints_which_hot_path_runs(tmp_path):
    from journaled import JournaledQueue

    with JournaledQueue(str(tmp_path / "q")) as q:
        q.put(b"x")
    assert "hot path (this process): pure Python (JOURNALED_PURE_PYTHON=1)" in _cli(
        "stat", str(tmp_path / "q"), env={"JOURNALED_PURE_PYTHON": "1"}
    )
    if native is not None:
        assert "hot path (this process): compiled" in _cli(
            "stat", str(tmp_path / "q"), env={"JOURNALED_PURE_PYTHON": ""}
        )


def test_qtest_summary_names_the_hot_path(tmp_path):
    out = _cli("qtest", "--items", "200", "--dir", str(tmp_path / "qt"), env={"JOURNALED_PURE_PYTHON": "1"})
    assert "hot path pure-python" in out.splitlines()[0]


# ------------------------------------------------------------------------------- the one switch

PKG = os.path.join(ROOT, "journaled")
C_SOURCE = os.path.join(PKG, "format", "_speedups.c")


def _configure_args(**changes: Any) -> dict[str, Any]:
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
        "encode_puts": py_encode_puts,
        "decode_many": py_decode_many,
        "decode_one": record.decode_one,
        "decode_columns": py_decode_columns,
    }
    args.update(changes)
    return args


def _still_works() -> None:
    a, b = bytearray(), bytearray()
    assert native.encode_puts(7, 40, 1, 2, 3, [b"x", b""], a) == py_encode_puts(
        7, 40, 1, 2, 3, [b"x", b""], b
    )
    assert a == b and native.decode_many(bytes(a), 40, 7)[0] == py_decode_many(bytes(b), 40, 7)[0]


@needs_native
@pytest.mark.parametrize("name", sorted(speedups.layout()))
def test_configure_refuses_a_format_constant_that_differs_from_the_compiled_one(name):
    """A format change in record.py that _speedups.c does not follow stops the compiled twin
    (and leaves the module as it was), instead of letting the two write different bytes."""
    wrong = {**speedups.layout(), name: speedups.layout()[name] + 1}
    with pytest.raises(ValueError, match=rf"built with {name} = \d+ but format/record.py says"):
        native.configure(**_configure_args(constants=wrong))
    missing = {k: v for k, v in speedups.layout().items() if k != name}
    with pytest.raises(ValueError, match=f"needs format/record.py's {name}"):
        native.configure(**_configure_args(constants=missing))
    _still_works()


@needs_native
def test_configure_refuses_unknown_constants_fields_and_missing_arguments():
    with pytest.raises(ValueError, match="does not know the constant 'PUT_CHECKSUM_AT'"):
        native.configure(**_configure_args(constants={**speedups.layout(), "PUT_CHECKSUM_AT": 3}))
    with pytest.raises(ValueError, match="does not build"):
        native.configure(
            **_configure_args(put_fields=("offset", "size", "id", "add_ms", "payload", "expire_ms"))
        )
    with pytest.raises(TypeError, match="takes all of its keyword arguments"):
        native.configure(**{k: v for k, v in _configure_args().items() if k != "decode_one"})
    with pytest.raises(TypeError, match="must be callable"):
        native.configure(**_configure_args(decode_one=None))
    with pytest.raises(ValueError, match="does not build"):
        native.configure_items(
            item_type=item.Item,
            item_fields=fallback.ITEM_FIELDS[:4],
            new_item=py_new_item,
            new_items=py_new_items,
            items_from_puts=py_items_from_puts,
        )
    _still_works()


@needs_native
def test_the_layout_the_switch_hands_over_is_the_c_files_table():
    with open(C_SOURCE, encoding="utf-8") as f:
        table = re.search(r"layout\[\] = \{(.*?)\n\};", f.read(), re.S)
    assert table is not None
    assert sorted(re.findall(r'\{"(\w+)", \1\}', table.group(1))) == sorted(speedups.layout())


def test_the_switch_refuses_a_stale_or_refusing_build():
    stale = types.ModuleType("stale")
    assert speedups.adopt(stale) == (
        f"the compiled extension has ABI None, this code needs {speedups.ABI_VERSION}: rebuild it"
    )

    def refuse(**kwargs: Any) -> None:
        raise ValueError("built with TYPE_PUT = 1 but format/record.py says 2")

    other = types.ModuleType("other")
    other.ABI_VERSION = speedups.ABI_VERSION  # type: ignore[attr-defined]
    other.configure = refuse  # type: ignore[attr-defined]
    assert speedups.adopt(other) == (
        "the compiled extension refused the format: built with TYPE_PUT = 1 but format/record.py says 2"
    )


def test_a_stale_build_runs_the_references_and_says_why():
    code = (
        "import sys, types; stale = types.ModuleType('journaled.format._speedups'); stale.ABI_VERSION = 1; "
        "sys.modules['journaled.format._speedups'] = stale; "
        "from journaled import item; from journaled.format import fallback, speedups; "
        "print(speedups.implementation, speedups.encode_puts is fallback.encode_puts, "
        "type(item.new_item).__name__); print(speedups.describe())"
    )
    full = {**os.environ, "JOURNALED_PURE_PYTHON": "", "PYTHONPATH": ROOT}
    out = subprocess.run(
        [sys.executable, "-c", code], env=full, check=True, capture_output=True, text=True
    ).stdout.splitlines()
    assert out == [
        "pure-python True function",
        f"pure Python (the compiled extension has ABI 1, this code needs {speedups.ABI_VERSION}: rebuild it)",
    ]


def _package_trees() -> dict[str, ast.Module]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(PKG):
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "__pycache__"))]
        for fn in filenames:
            if fn.endswith(".py"):
                path = os.path.join(dirpath, fn)
                with open(path, encoding="utf-8") as f:
                    out[os.path.relpath(path, ROOT)] = ast.parse(f.read(), path)
    return out


#: the switch of the C extension, and of the mypyc-compiled modules (``journaled.hotpath``, whose
#: import hook ``journaled/__init__.py`` installs before anything else is imported)
SWITCHES = {
    os.path.join("journaled", "format", "speedups.py"),
    os.path.join("journaled", "hotpath.py"),
    os.path.join("journaled", "__init__.py"),
}


def test_only_the_switch_imports_the_extension_or_reads_its_environment_variable():
    """One switchboard per compiled part: no other module imports ``_speedups``, probes it with
    hasattr/getattr, or decides compiled vs pure from the environment."""
    offenders = []
    for path, tree in _package_trees().items():
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{a.name}" for a in node.names] + [node.module or ""]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id in ("hasattr", "getattr") and node.args:
                    names = [ast.unparse(node.args[0])]
            elif isinstance(node, ast.Constant) and node.value == speedups.ENV_VAR:
                names = [speedups.ENV_VAR]
            hits = [n for n in names if "_speedups" in n or "native" in n or n == speedups.ENV_VAR]
            if hits and path not in SWITCHES:
                offenders.append(f"{path}:{node.lineno} {hits}")
    assert offenders == []


def _sections() -> dict[str, list[str]]:
    """Each section of _speedups.c -> the references it names."""
    with open(C_SOURCE, encoding="utf-8") as f:
        text = f.read()
    out = {}
    for m in re.finditer(r"/\* -{20,} (\w+)\n \* reference: (.*?)\*/", text, re.S):
        out[m.group(1)] = re.findall(r"\b(\w+)\b", m.group(2).split("format/fallback.py,", 1)[-1])
    return out


def test_each_c_section_names_its_reference_and_each_reference_its_section():
    sections = _sections()
    assert {
        "encode_puts",
        "encode_putx",
        "decode_many",
        "decode_columns",
        "new_items",
        "items_from_puts",
        "unit_records",
    } <= set(sections)
    with open(os.path.join(PKG, "format", "fallback.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    twins = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            doc = ast.get_docstring(node) or ""
            m = re.search(r"compiled twin: _speedups\.c, section (\w+)", doc)
            if m:
                twins[node.name] = m.group(1)
    assert set(twins) == {
        "encode_puts",
        "encode_putx",
        "decode_many",
        "decode_columns",
        "new_item",
        "new_items",
        "items_from_puts",
        "walk_puts",
        "unit_records",
    }
    for name, section in twins.items():
        assert name in sections[section], (name, section)


def test_items_read_back_keep_their_metadata_after_the_twins_are_configured_again(tmp_path):
    """Configuring the compiled item twins (as this module does at import) must keep PUTX items'
    headers and key: every test module collected in one run shares the configured extension."""
    from journaled import JournaledQueue, ReaderConfig

    path = str(tmp_path / "q")
    with JournaledQueue(path) as q:
        q.put(b"x", key=b"k", headers={"h": b"v"})
    with JournaledQueue(path) as q:
        got = q.reader("late", ReaderConfig(start="earliest")).get(timeout=5)
    assert (got.key, dict(got.headers)) == (b"k", {"h": b"v"})
