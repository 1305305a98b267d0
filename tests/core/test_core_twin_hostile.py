"""The compiled reader core's C methods (``take``, ``commit``, ``on_put``) on hostile inputs.

Lists that hold things other than items, numbers that are not plain ints or overflow a C
integer, objects whose ``__eq__``/``__hash__``/``__index__`` raise or run the garbage collector,
a core whose attributes were replaced by other types, items whose data is not ``bytes``, and
Python code running inside a C method (the ``head_moved`` callback, the ``__eq__`` of a key met in
a dict lookup, ``gc.callbacks``) that changes the core under it.

The contract: never a crash and never a ``SystemError``; the compiled method either gives what the
reference gives (the same result and the same state, or the same type of exception) or refuses
with ``TypeError``/``ValueError``.  scripts/sanitize_twins.sh runs these under AddressSanitizer.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import types
from collections import deque
from collections.abc import Callable, Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journaled.config import ReaderConfig
from journaled.core import twin
from journaled.core.readercore import ITEM_OVERHEAD, ReaderCore
from journaled.errors import UnknownRead
from journaled.format.smallfiles import CheckpointData
from journaled.item import Item
from journaled.log.journal import Cursor
from support.twin_log import Calls, TwinLog, make_items, new_core, outcome

CompiledReaderCore = twin.CompiledReaderCore

pytestmark = pytest.mark.skipif(
    CompiledReaderCore is None,
    reason="no compiled reader core (journaled.core._coreops not built, or JOURNALED_PURE_PYTHON=1)",
)

ADD_MS = 1_700_000_000_000
HOSTILE = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ----------------------------------------------------------------------------- comparing
def norm(v: Any) -> Any:
    """``v`` as plain values to compare, without running any of its own Python code."""
    if v is None or type(v) in (bool, int, str, bytes):
        return v
    if type(v) is float:
        return float.__repr__(v)  # nan is nan
    if isinstance(v, int):  # an int subclass: its value, read without its methods
        return (type(v).__name__, int.__repr__(v))
    if isinstance(v, (bytearray, memoryview)):
        return (type(v).__name__, bytes(v))
    if isinstance(v, Item):
        extra = tuple(norm(getattr(v, f)) for f in ("kind", "reason", "reader") if hasattr(v, f))
        fields = (v.id, v.data, v.add_time, v.expire_at, v.error_count)
        return (type(v).__name__, *map(norm, fields), *extra)
    if isinstance(v, dict):
        return (type(v).__name__, [(norm(k), norm(x)) for k, x in dict.items(v)])
    if isinstance(v, (set, frozenset)):
        return (type(v).__name__, sorted((norm(x) for x in v), key=repr))
    if isinstance(v, (deque, list, tuple)):
        return (type(v).__name__, [norm(x) for x in v])
    if isinstance(v, Cursor):
        return ("Cursor", v.ms, v.offset, v.next_id)
    if isinstance(v, ReaderConfig):
        return ("ReaderConfig", *(norm(getattr(v, a.name)) for a in attrs.fields(ReaderConfig)))
    return type(v).__name__


#: a core's attributes that are not state (the same objects, or callables, on both sides)
NOT_STATE = {"lock", "journal", "head_moved", "wake_engine"}


def raw_state(core: ReaderCore) -> dict[str, Any]:
    """Every attribute of ``core``, whatever was put there, as plain values."""
    return {k: norm(v) for k, v in sorted(vars(core).items()) if k not in NOT_STATE}


def result_of(got: tuple[str, Any]) -> Any:
    return (got[0], type(got[1]).__name__ if got[0] == "raised" else norm(got[1]))


def agree_or_refuse(ref: ReaderCore, tw: ReaderCore, call: Callable[[ReaderCore], Any]) -> str:
    """``call`` on both cores: the twin returns what the reference returns and leaves the same
    state, or raises the same type of exception, or refuses with TypeError/ValueError.  Returns
    "same", or "raised"/"refused" (after which the two states may differ)."""
    want = outcome(call, ref)
    got = outcome(call, tw)
    if got[0] == "raised":
        assert not isinstance(got[1], SystemError), f"the twin raised {got[1]!r}"
        if want[0] == "raised" and type(want[1]) is type(got[1]):
            return "raised"
        if isinstance(got[1], (TypeError, ValueError)):
            return "refused"
    assert result_of(got) == result_of(want), f"twin {got!r}, reference {want!r}"
    assert raw_state(tw) == raw_state(ref)
    return "same"


def cores(
    payloads: list[bytes] | None = None, head: int = 1, **config: Any
) -> tuple[ReaderCore, ReaderCore, tuple[Calls, Calls]]:
    """A reference and a compiled core, each over its own journal of ``payloads``."""
    assert CompiledReaderCore is not None
    cfg = ReaderConfig(**config)
    calls = (Calls(), Calls())
    out = []
    for cls, c in zip((ReaderCore, CompiledReaderCore), calls):
        log = TwinLog()
        log.append(make_items(1, payloads or [], ADD_MS))
        out.append(new_core(cls, cfg, CheckpointData(head), log, c))
    return out[0], out[1], calls


def put_items(core: ReaderCore, payloads: list[bytes]) -> list[Item]:
    items = make_items(core.journal.next_id, payloads, ADD_MS)
    core.journal.append(items)  # type: ignore[attr-defined]
    core.on_put(items, sum(map(len, payloads)))
    return items


def each(ref: ReaderCore, tw: ReaderCore, fn: Callable[[ReaderCore], Any]) -> None:
    """The same setup on both cores (each with its own objects)."""
    fn(ref)
    fn(tw)


def steady(payloads: list[bytes] | None = None, **config: Any) -> tuple[ReaderCore, ReaderCore]:
    """Cores in the state the fast paths take: items in memory, nothing parked or expiring."""
    ref, tw, _ = cores(**config)
    each(ref, tw, lambda c: put_items(c, payloads or [b"a", b"bb", b"ccc"]))
    return ref, tw


# ----------------------------------------------------------------------------- hostile objects
class Boom(Exception):
    pass


class EqHashRaise:
    def __eq__(self, other: object) -> bool:
        raise Boom("__eq__")

    def __hash__(self) -> int:
        raise Boom("__hash__")


class EqHashCollect:
    def __eq__(self, other: object) -> bool:
        gc.collect()
        return False

    def __hash__(self) -> int:
        gc.collect()
        return 1


class IndexRaises(int):
    def __index__(self) -> int:
        raise Boom("__index__")

    def __radd__(self, other: object) -> Any:
        raise Boom("__radd__")


class IndexHuge(int):
    def __index__(self) -> int:
        return 2**70


class IndexCollects(int):
    def __index__(self) -> int:
        gc.collect()
        return int(self)


class NotAnInt:
    def __index__(self) -> int:
        return 3


class WeirdItem(Item):
    """An Item subclass whose comparisons and hash misbehave."""

    def __eq__(self, other: object) -> bool:
        raise Boom("__eq__")

    def __hash__(self) -> int:
        raise Boom("__hash__")


class HostileId(int):
    """An id whose hash is the int's, but whose ``__eq__`` runs ``act`` first."""

    act: Callable[[], Any] = staticmethod(lambda: None)

    def __eq__(self, other: object) -> bool:
        type(self).act()
        return int(self) == other

    __hash__ = int.__hash__


# ----------------------------------------------------------------------------- on_put
@pytest.mark.parametrize(
    "make",
    [
        lambda first: [1, 2],
        lambda first: [None],
        lambda first: [Item(first, b"x", 1.0), "not an item"],
        lambda first: [Item(first, b"x", 1.0), 7],
        lambda first: [object()],
        lambda first: [EqHashRaise()],
        lambda first: [],
        lambda first: (Item(first, b"x", 1.0),),
        lambda first: deque([Item(first, b"x", 1.0)]),
        lambda first: Item(first, b"x", 1.0),
        lambda first: None,
        lambda first: "ab",
    ],
    ids=[
        "ints",
        "none",
        "item-then-str",
        "item-then-int",
        "object",
        "eq-hash-raise",
        "empty-list",
        "tuple",
        "deque",
        "bare-item",
        "None",
        "str",
    ],
)
def test_on_put_of_things_that_are_not_a_list_of_items_matches_the_reference_or_is_refused(make):
    ref, tw = steady()
    if agree_or_refuse(ref, tw, lambda c: c.on_put(make(c.journal.next_id), 1)) != "refused":
        agree_or_refuse(ref, tw, lambda c: [c.take() for _ in range(5)])


@pytest.mark.parametrize(
    "nbytes",
    [-1, -(2**63), 2**63 - 1, 2**63, 2**64, 2**70, -(2**70), 0, True, 1.5, float("inf"), float("nan")]
    + [
        "3",
        None,
        b"3",
        Decimal(3),
        Fraction(3, 1),
        NotAnInt(),
        IndexRaises(3),
        IndexHuge(3),
        IndexCollects(3),
    ],
    ids=repr,
)
def test_on_put_with_any_byte_count_matches_the_reference_or_is_refused(nbytes):
    ref, tw = steady()
    put = lambda c: c.on_put([Item(c.journal.next_id, b"abc", 1.0)], nbytes)  # noqa: E731
    if agree_or_refuse(ref, tw, put) != "refused":
        agree_or_refuse(ref, tw, lambda c: [c.take() for _ in range(5)])


@HOSTILE
@given(
    nbytes=st.integers(-(2**80), 2**80) | st.sampled_from([2**63 - 1, -(2**63), 2**63, 2**64 - 1]),
    mem_bytes=st.sampled_from([0, 5, 2**62, 2**63 - 1, -(2**63), 2**64, -1]),
    backlog=st.sampled_from([0, 5, 2**63 - 1, 2**63, -(2**63), 2**70]),
    max_memory=st.sampled_from([ITEM_OVERHEAD * 8, 2**62, 2**63 - 1, 2**63, 2**70]),
    behind=st.booleans(),
)
def test_on_put_never_overflows_where_the_reference_counts_exactly(
    nbytes, mem_bytes, backlog, max_memory, behind
):
    ref, tw = steady(max_memory=max_memory)

    def setup(c: ReaderCore) -> None:
        c.mem_bytes, c.backlog_bytes = mem_bytes, backlog
        c.load_id = c.journal.next_id if behind else None

    each(ref, tw, setup)
    agree_or_refuse(ref, tw, lambda c: c.on_put([Item(c.journal.next_id, b"abc", 1.0)], nbytes))


# ----------------------------------------------------------------------------- commit
@pytest.mark.parametrize(
    "what",
    [True, False, 1.5, "1", b"1", None, EqHashRaise(), EqHashCollect(), NotAnInt(), IndexRaises(1)]
    + [IndexHuge(1), IndexCollects(1), 2**70, 2**63, -1, -(2**63) - 1, 0, object()],
    ids=repr,
)
def test_commit_of_anything_but_an_open_read_matches_the_reference_or_is_refused(what):
    ref, tw = steady()
    each(ref, tw, lambda c: c.take())
    agree_or_refuse(ref, tw, lambda c: c.commit(what))
    agree_or_refuse(ref, tw, lambda c: c.commit(1))


def test_commit_of_an_item_subclass_that_was_never_handed_out_is_an_unknown_read():
    ref, tw = steady()
    each(ref, tw, lambda c: c.take())
    with pytest.raises(UnknownRead):
        tw.commit(WeirdItem(1, b"a", ADD_MS / 1000))
    with pytest.raises(UnknownRead):
        ref.commit(WeirdItem(1, b"a", ADD_MS / 1000))
    assert raw_state(tw) == raw_state(ref) and 1 in tw.open


def test_an_item_subclass_handed_out_is_committed_as_the_reference_commits_it():
    ref, tw, _ = cores()
    each(ref, tw, lambda c: c.on_put([WeirdItem(1, b"a", 1.0), WeirdItem(2, b"b", 1.0)], 2))
    agree_or_refuse(ref, tw, lambda c: c.take())
    agree_or_refuse(ref, tw, lambda c: c.commit(c.open[1]))
    agree_or_refuse(ref, tw, lambda c: c.take())
    agree_or_refuse(ref, tw, lambda c: c.commit(2))


def test_a_copy_of_the_item_handed_out_does_not_commit_the_read():
    ref, tw = steady()
    each(ref, tw, lambda c: c.take())
    equal = lambda c: attrs.evolve(c.open[1])  # noqa: E731  # equal, not the same object
    with pytest.raises(UnknownRead):
        tw.commit(equal(tw))
    assert 1 in tw.open and tw.committed == 0


# ----------------------------------------------------------------------------- items
@pytest.mark.parametrize(
    "data", [bytearray(b"abc"), memoryview(b"abc"), memoryview(b"xabcx")[1:4], bytearray()], ids=repr
)
def test_items_whose_data_is_not_bytes_go_through_take_and_commit_as_the_reference_does(data):
    ref, tw, _ = cores()
    each(ref, tw, lambda c: c.on_put([Item(1, data, 1.0), Item(2, b"abc", 1.0)], 6))
    for _ in range(2):
        agree_or_refuse(ref, tw, lambda c: c.take())
    agree_or_refuse(ref, tw, lambda c: c.commit(c.open[1]))
    agree_or_refuse(ref, tw, lambda c: c.commit(c.open[2]))


@pytest.mark.parametrize(
    "item_id", [2**70, 2**63, 2**63 - 1, -1, -(2**63), 0, IndexRaises(1), IndexHuge(1), True], ids=repr
)
def test_items_with_ids_out_of_range_or_not_plain_ints_match_the_reference(item_id):
    ref, tw, _ = cores()
    each(ref, tw, lambda c: c.on_put([Item(item_id, b"abc", 1.0)], 3))
    agree_or_refuse(ref, tw, lambda c: c.take())
    agree_or_refuse(ref, tw, lambda c: c.commit(next(iter(c.open.values()))) if c.open else None)


@pytest.mark.parametrize(
    "field, value",
    [
        ("error_count", 2**70),
        ("error_count", -1),
        ("error_count", "1"),
        ("error_count", None),
        ("expire_at", "soon"),
        ("expire_at", float("nan")),
        ("add_time", None),
    ],
)
def test_items_with_odd_fields_are_taken_as_the_reference_takes_them(field, value):
    ref, tw, _ = cores(max_errors=3)

    def setup(c: ReaderCore) -> None:
        item = Item(1, b"abc", 1.0)
        object.__setattr__(item, field, value)
        c.on_put([item, Item(2, b"d", 1.0)], 4)

    each(ref, tw, setup)
    for _ in range(3):
        agree_or_refuse(ref, tw, lambda c: c.take())


# ----------------------------------------------------------------------------- the core's attributes
REPLACEMENTS: dict[str, list[Any]] = {
    "mem": [[], lambda items: list(items), lambda items: tuple(items), None, "abc", {}],
    "open": [[], None, lambda d: types.MappingProxyType(dict(d)), lambda d: type("D", (dict,), {})(d)],
    "config": [None, object(), types.SimpleNamespace(max_memory=10**6), lambda cfg: attrs.asdict(cfg)],
    "parked": [None, [], {}, {5: Item(5, b"p", 1.0)}],
    "errors": [None, [], {1: "x"}],
    "done": [None, [], frozenset(), {1.5}],
    "waiters": [None, [], deque([None])],
    "load_id": ["3", 2.0, 2**70, -1],
    "saw_expiry": [None, 1, "yes"],
    "head_moved": [None, 1],
}

REPLACE_CASES = [(name, k) for name, values in REPLACEMENTS.items() for k in range(len(values))]
OPS: dict[str, Callable[[ReaderCore], Any]] = {
    "take": lambda c: c.take(),
    "commit": lambda c: c.commit(next(iter(dict.values(c.__dict__["open"])))),
    "commit-id": lambda c: c.commit(1),
    "on_put": lambda c: c.on_put([Item(c.journal.next_id, b"zz", 1.0)], 2),
    "on_put-expiring": lambda c: c.on_put([Item(c.journal.next_id, b"zz", 1.0, 2e9)], 2),
}


@pytest.mark.parametrize("name, k", REPLACE_CASES, ids=[f"{n}-{k}" for n, k in REPLACE_CASES])
@pytest.mark.parametrize("op", list(OPS))
def test_a_core_whose_attributes_were_replaced_matches_the_reference_or_refuses(name, k, op):
    ref, tw = steady()
    each(ref, tw, lambda c: c.take())  # item 1 open
    value = REPLACEMENTS[name][k]

    def setup(c: ReaderCore) -> None:
        old = getattr(c, name)
        setattr(c, name, value(old) if callable(value) else copy.deepcopy(value))

    each(ref, tw, setup)
    if op.startswith("commit") and not isinstance(vars(ref).get("open"), dict):
        op = "commit-id"
    agree_or_refuse(ref, tw, OPS[op])


def test_a_core_whose_attributes_were_deleted_matches_the_reference_or_refuses():
    for name in ("mem", "open", "config", "parked", "mem_bytes", "delivered", "committed", "head", "load_id"):
        for op in OPS.values():
            ref, tw = steady()
            each(ref, tw, lambda c: c.take())
            each(ref, tw, lambda c: delattr(c, name))
            agree_or_refuse(ref, tw, lambda c: op(c) if name != "open" else c.commit(1))


EDGES = [2**70, 2**64, 2**63, 2**63 - 1, 2**62, -1, -(2**63), -(2**63) - 1, 0]


@HOSTILE
@given(
    changes=st.lists(
        st.tuples(
            st.sampled_from(["head", "mem_bytes", "backlog_bytes", "delivered", "committed", "put_origin"]),
            st.sampled_from(EDGES),
        ),
        min_size=1,
        max_size=3,
    ),
    max_memory=st.sampled_from([ITEM_OVERHEAD * 8, 2**63 - 1, 2**70]),
    max_errors=st.sampled_from([None, 1, 2**63 - 1, 2**70]),
    ops=st.lists(st.sampled_from(list(OPS)), min_size=1, max_size=6),
)
def test_a_core_with_huge_or_negative_numbers_matches_the_reference_or_refuses(
    changes, max_memory, max_errors, ops
):
    ref, tw = steady(max_memory=max_memory, max_errors=max_errors)
    each(ref, tw, lambda c: c.take())
    for name, value in changes:
        each(ref, tw, lambda c: setattr(c, name, value))
    for op in ops:
        if op == "commit" and not ref.open:
            op = "commit-id"
        if agree_or_refuse(ref, tw, OPS[op]) != "same":
            return  # the states may differ from here on


# ----------------------------------------------------------------------------- Python code inside C
# Keys of open/errors/done that are not exact ints run their __eq__ in the C method's dict and set
# lookups.  The queue never makes such keys (ids are exact ints), but where they are, the compiled
# methods must still do what the reference does: read each value after the code that may change it,
# look each key up as often as the reference does.
HEAD_MOVED_ACTS: dict[str, Callable[[ReaderCore], Any]] = {
    "committed-huge": lambda c: setattr(c, "committed", 2**70),
    "committed-max": lambda c: setattr(c, "committed", 2**63 - 1),
    "committed-str": lambda c: setattr(c, "committed", "x"),
    "committed-deleted": lambda c: delattr(c, "committed"),
    "head-back": lambda c: setattr(c, "head", 1),
    "done-replaced": lambda c: setattr(c, "done", {99}),
    "open-cleared": lambda c: c.open.clear(),
    "mem-replaced": lambda c: setattr(c, "mem", []),
    "backlog-zeroed": lambda c: setattr(c, "backlog_bytes", 0),
    "dirty-deleted": lambda c: delattr(c, "dirty"),
    "collect": lambda c: gc.collect(),
    "raise": lambda c: (_ for _ in ()).throw(Boom("head_moved")),
}


@pytest.mark.parametrize("act", list(HEAD_MOVED_ACTS))
def test_a_head_moved_callback_that_changes_the_core_leaves_it_as_the_reference_does(act):
    ref, tw = steady()
    each(ref, tw, lambda c: c.take())
    each(ref, tw, lambda c: setattr(c, "head_moved", lambda: HEAD_MOVED_ACTS[act](c)))
    agree_or_refuse(ref, tw, lambda c: c.commit(c.open[1]))


def test_a_head_moved_callback_that_replaces_the_cores_dict_leaves_it_as_the_reference_does():
    ref, tw = steady()
    each(ref, tw, lambda c: c.take())

    def swap(c: ReaderCore) -> None:
        c.__dict__ = dict(c.__dict__)

    each(ref, tw, lambda c: setattr(c, "head_moved", lambda: swap(c)))
    agree_or_refuse(ref, tw, lambda c: c.commit(c.open[1]))


def hostile_id(value: int, act: Callable[[], Any]) -> HostileId:
    """``value`` as a :class:`HostileId` that runs ``act`` whenever it is compared."""
    return type("Key", (HostileId,), {"act": staticmethod(act)})(value)


def _second_call(act: Callable[[], Any]) -> Callable[[], Any]:
    calls = [0]

    def run() -> Any:
        calls[0] += 1
        if calls[0] == 2:
            act()

    return run


@pytest.mark.parametrize(
    "act",
    [
        "raise",
        "raise-on-second",
        "drop-self-on-second",
        "backlog-zeroed",
        "head-moved-on",
        "collect",
    ],
)
def test_an_error_count_key_whose_eq_runs_code_leaves_the_core_as_the_reference_does(act):
    """Item 1, open, has an error count whose dict key runs Python code when compared: the commit
    looks it up as the reference does and uses what the core holds after the code ran."""
    ref, tw = steady()
    each(ref, tw, lambda c: c.take())

    def setup(c: ReaderCore) -> None:
        c.errors[1] = 2
        acts: dict[str, Callable[[], Any]] = {
            "raise": lambda: (_ for _ in ()).throw(Boom("__eq__")),
            "raise-on-second": _second_call(lambda: (_ for _ in ()).throw(Boom("__eq__"))),
            "drop-self-on-second": _second_call(lambda: [c.errors.pop(k) for k in list(c.errors)]),
            "backlog-zeroed": lambda: setattr(c, "backlog_bytes", 0),
            "head-moved-on": lambda: setattr(c, "head", 1 if c.head != 1 else 2),
            "collect": gc.collect,
        }
        c.errors[hostile_id(1, acts[act])] = c.errors.pop(1)

    each(ref, tw, setup)
    agree_or_refuse(ref, tw, lambda c: c.commit(c.open[1]))


@pytest.mark.parametrize(
    "act",
    [
        "raise",
        "true-then-gone",
        "collect",
        "head-forward",
    ],
)
def test_a_done_id_whose_eq_runs_code_leaves_the_core_as_the_reference_does(act):
    """Ids 2 and 3 were committed out of order; id 2's entry in ``done`` runs Python code when the
    head reaches it."""
    ref, tw = steady([b"a", b"b", b"c", b"d"])
    for _ in range(3):
        each(ref, tw, lambda c: c.take())
    each(ref, tw, lambda c: (c.commit(c.open[2]), c.commit(c.open[3])))

    def setup(c: ReaderCore) -> None:
        acts: dict[str, Callable[[], Any]] = {
            "raise": lambda: (_ for _ in ()).throw(Boom("__eq__")),
            "true-then-gone": _second_call(lambda: c.done.clear()),
            "collect": gc.collect,
            "head-forward": lambda: setattr(c, "head", 3),
        }
        c.done.discard(2)
        c.done.add(hostile_id(2, acts[act]))

    each(ref, tw, setup)
    agree_or_refuse(ref, tw, lambda c: c.commit(c.open[1]))


@pytest.mark.parametrize("act", ["raise", "collect", "mem-bytes-changed", "delivered-changed"])
def test_an_open_read_key_whose_eq_runs_code_leaves_the_core_as_the_reference_does(act):
    """The open reads hold a key equal to item 2's id that runs Python code when compared: the take
    that opens item 2 meets it."""
    ref, tw = steady()
    each(ref, tw, lambda c: c.take())

    def setup(c: ReaderCore) -> None:
        acts: dict[str, Callable[[], Any]] = {
            "raise": lambda: (_ for _ in ()).throw(Boom("__eq__")),
            "collect": gc.collect,
            "mem-bytes-changed": lambda: setattr(c, "mem_bytes", 1000),
            "delivered-changed": lambda: setattr(c, "delivered", 100),
        }
        c.open[hostile_id(2, acts[act])] = Item(2, b"old", 1.0)

    each(ref, tw, setup)
    agree_or_refuse(ref, tw, lambda c: c.take())


# ----------------------------------------------------------------------------- gc.callbacks
@contextlib.contextmanager
def collecting(callback: Callable[[str, dict[str, int]], None]) -> Iterator[None]:
    """``callback`` runs on every collection, and a collection runs on nearly every allocation."""
    threshold = gc.get_threshold()
    gc.callbacks.append(callback)
    gc.set_threshold(1, 1, 1)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(callback)


GC_ACTS: dict[str, Callable[[ReaderCore], Any]] = {
    "mem-cleared": lambda c: c.mem.clear() if isinstance(c.mem, deque) else None,
    "mem-grown": lambda c: c.mem.append(Item(99, b"late", 1.0)) if isinstance(c.mem, deque) else None,
    "mem-replaced": lambda c: setattr(c, "mem", deque()),
    "open-replaced": lambda c: setattr(c, "open", {}),
    "config-replaced": lambda c: setattr(c, "config", ReaderConfig(max_memory=ITEM_OVERHEAD + 1)),
    "counts-huge": lambda c: (setattr(c, "delivered", 2**70), setattr(c, "mem_bytes", 2**70)),
    "parked": lambda c: c.parked.park(Item(98, b"p", 1.0), 0.0),
    "waiter": lambda c: c.waiters.append(types.SimpleNamespace(deliver=lambda i: None, wake=lambda: None)),
}

ALLOWED_UNDER_GC = (AttributeError, KeyError, IndexError, TypeError, ValueError, RuntimeError, Boom)


@HOSTILE
@given(
    act=st.sampled_from(list(GC_ACTS)),
    ops=st.lists(st.sampled_from(["take", "commit", "on_put", "on_put-expiring"]), min_size=1, max_size=8),
    once=st.booleans(),
)
def test_a_gc_callback_that_changes_the_core_mid_call_never_crashes_it(act, ops, once):
    """The garbage collector may run inside a C method and its callbacks change the core: the
    outcome then depends on when it ran, so only this is checked: no crash, no SystemError, only
    the errors the reference itself can meet on a core so changed."""
    _ref, tw = steady([b"%d" % i * 40 for i in range(12)], max_memory=6 * ITEM_OVERHEAD)
    fired = [0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and not (once and fired[0]):
            fired[0] += 1
            GC_ACTS[act](tw)

    with collecting(callback):
        for op in ops:
            if op == "commit" and not tw.open:
                op = "commit-id"
            got = outcome(OPS[op], tw)
            if got[0] == "raised":
                assert isinstance(got[1], ALLOWED_UNDER_GC), f"{op} raised {got[1]!r}"
            else:
                assert got[1] is None or isinstance(got[1], Item)
