"""Offsets, options and planning of the Spark source, free of pyspark (unit-testable alone).

An offset is, per queue, the next id to read: ``{"<queue key>": {"id": 123}, ...}`` with the
queue keys in sorted order (Spark compares offsets as JSON text, so the order must never vary).
A queue's key is the path it was given by, normalized (``os.path.normpath``); the ``queue``
column carries the same string.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence

import attrs

from journaled.errors import JournaledError
from journaled.offline.segments import Position, QueueView, Segment

# offered here as before they moved to the light schema module
from journaled.spark.schema import ALL_COLUMNS_DDL as ALL_COLUMNS_DDL
from journaled.spark.schema import COLUMN_TYPES as COLUMN_TYPES
from journaled.spark.schema import DEFAULT_COLUMNS as DEFAULT_COLUMNS
from journaled.spark.schema import HEADERS_DDL as HEADERS_DDL
from journaled.spark.schema import NULLABLE_COLUMNS as NULLABLE_COLUMNS
from journaled.spark.schema import QUEUE_DDL as QUEUE_DDL
from journaled.spark.schema import SCHEMA_DDL as SCHEMA_DDL
from journaled.spark.schema import OptionError as OptionError
from journaled.spark.schema import opt as opt
from journaled.spark.schema import opt_bool as opt_bool
from journaled.spark.schema import queue_paths as queue_paths
from journaled.spark.schema import schema_ddl as schema_ddl

log = logging.getLogger("journaled.spark")

DEFAULT_SPLIT_BYTES = 64 * 1024 * 1024


class DataLossError(JournaledError):
    """Ids a query needs are gone (archived or damaged) and ``failOnDataLoss`` is true."""


def check_columns(columns: Sequence[tuple[str, str, bool]]) -> None:
    """Refuse a schema the source cannot fill, given as ``(name, DataType.simpleString(),
    nullable)`` for each field.

    A query may name its own schema (``spark.read.format("journaled").schema("value BINARY")``)
    instead of taking :data:`SCHEMA_DDL`: any of the source's columns, each at most once, in any
    order and in any letter case, each with the source's type.  Spark hands a Python source no
    column pruning, so this is how a query that needs only ``value`` stops paying for the rest."""
    if not columns:
        raise OptionError("a schema given to the journaled source must name at least one column")
    seen: set[str] = set()
    for name, type_, nullable in columns:
        want = COLUMN_TYPES.get(name.lower())
        if want is None:
            known = ", ".join(COLUMN_TYPES)
            raise OptionError(f"the journaled source has no column {name!r} (it has {known})")
        if type_.lower() != want:
            raise OptionError(f"column {name!r} of the journaled source is {want}, not {type_}")
        if not nullable and name.lower() in NULLABLE_COLUMNS:
            raise OptionError(f"column {name!r} is null for an item without one: it cannot be NOT NULL")
        if name.lower() in seen:
            raise OptionError(f"column {name!r} is named twice in the schema")
        seen.add(name.lower())


def opt_int(options: Mapping[str, str], name: str) -> int | None:
    v = opt(options, name)
    if v is None:
        return None
    try:
        n = int(v)
    except ValueError:
        raise OptionError(f"option {name} must be an integer, not {v!r}") from None
    if n <= 0:
        raise OptionError(f"option {name} must be positive, not {n}")
    return n


_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def opt_duration_ms(options: Mapping[str, str], name: str, default: str) -> int:
    """A duration option like Spark's: ``500ms``, ``10s``, ``15m``, ``1h``, ``2d`` (no unit: ms)."""
    raw = (opt(options, name) or default).strip().lower()
    digits = raw.rstrip("abcdefghijklmnopqrstuvwxyz").strip()
    unit = raw[len(digits) :].strip() or "ms"
    if not digits.isdigit() or unit not in _UNITS_MS:
        raise OptionError(f"option {name} must be a duration like 500ms, 10s, 15m or 1h, not {raw!r}")
    return int(digits) * _UNITS_MS[unit]


def opt_int_alias(options: Mapping[str, str], name: str, kafka_name: str) -> int | None:
    """Integer option ``name``, also accepted under Kafka's ``kafka_name`` (not both, if they differ)."""
    ours, theirs = opt_int(options, name), opt_int(options, kafka_name)
    if ours is not None and theirs is not None and ours != theirs:
        raise OptionError(f"options {name} and {kafka_name} are one option; give one of them")
    return ours if ours is not None else theirs


def offsets_behind(progress: object) -> dict[str, int]:
    """How many ids each queue's newest lies past a query's end offset: ``{key: lag}``.

    ``progress`` is what ``StreamingQueryProgress`` gives: one entry of its ``sources``
    (``query.lastProgress["sources"][i]``), the whole progress (``query.lastProgress``, or
    ``json.loads(progress.json)``), or the list of sources.  Each entry compares
    ``latestOffset`` (what the queue held when the batch was planned, from
    ``reportLatestOffset``) with ``endOffset`` (what the batch read up to).

    A lag that Spark has not measured is left out rather than reported as 0: right after a
    restart ``latestOffset`` is ``null`` (``"None"`` in listener events), an idle source may
    have no offsets, and a queue added to ``paths`` has no end offset yet.  With several
    sources, entries that are not journaled's (a Kafka source beside ours) are skipped, and a
    queue read by two sources gets the larger lag.  A single entry whose offsets are not
    journaled's raises :class:`OptionError`.
    """
    if isinstance(progress, Mapping) and "sources" in progress:
        progress = progress["sources"]
    if isinstance(progress, Mapping):
        return _behind(progress)
    if not isinstance(progress, (list, tuple)):
        raise TypeError(f"offsets_behind takes a streaming progress or its sources, not {progress!r}")
    out: dict[str, int] = {}
    for entry in progress:
        if not isinstance(entry, Mapping):
            raise TypeError(f"a progress source must be a mapping, not {entry!r}")
        try:
            lags = _behind(entry)
        except OptionError:
            continue  # another kind of source in the same query
        for k, lag in lags.items():
            out[k] = max(lag, out.get(k, 0))
    return dict(sorted(out.items()))


def _behind(entry: Mapping[str, object]) -> dict[str, int]:
    latest, end = _measured(entry.get("latestOffset")), _measured(entry.get("endOffset"))
    if latest is None or end is None:
        return {}
    lo, hi = decode(end), decode(latest)
    return {k: max(0, hi[k] - lo[k]) for k in sorted(hi) if k in lo}


def _measured(offset: object) -> Mapping[str, object] | str | None:
    """An offset as progress carries it, or ``None`` when Spark has none to show."""
    if offset is None:
        return None
    if isinstance(offset, str):
        text = offset.strip()
        return None if text in ("", "null", "None") else text
    if isinstance(offset, Mapping):
        return offset
    raise OptionError(f"an offset in a streaming progress must be JSON, not {offset!r}")


def encode(ids: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """The offset dict for ``{key: next id}``, keys sorted."""
    return {k: {"id": int(ids[k])} for k in sorted(ids)}


def decode(offset: Mapping[str, object] | str) -> dict[str, int]:
    """``{key: next id}`` from an offset dict (or its JSON text)."""
    obj = json.loads(offset) if isinstance(offset, str) else offset
    if not isinstance(obj, Mapping):
        raise OptionError(f"offsets must be a JSON object, not {offset!r}")
    out = {}
    for k, v in obj.items():
        if isinstance(v, Mapping) and isinstance(v.get("id"), int):
            out[os.path.normpath(k)] = int(v["id"])
        elif isinstance(v, int):
            out[os.path.normpath(k)] = v
        else:
            raise OptionError(f'offset of queue {k!r} must look like {{"id": 123}}, not {v!r}')
    return out


@attrs.define
class Planner:
    """Everything the driver side needs over a set of queue directories."""

    paths: dict[str, str]
    fail_on_data_loss: bool = True
    split_bytes: int = DEFAULT_SPLIT_BYTES
    min_partitions: int = 1
    views: dict[str, QueueView] = attrs.field(factory=dict)

    def view(self, key: str) -> QueueView:
        v = self.views.get(key)
        if v is None:
            v = self.views[key] = QueueView(self.paths[key])
        else:
            v.refresh()
        return v

    # ------------------------------------------------------------------ named offsets
    def earliest(self) -> dict[str, int]:
        return {k: self.view(k).first_id() for k in self.paths}

    def latest(self) -> dict[str, int]:
        return {k: self.view(k).tail().id for k in self.paths}

    def at_time(self, when_ms: int) -> dict[str, int]:
        return {k: self.view(k).locate_time(when_ms) for k in self.paths}

    def resolve(self, spec: str | None, timestamp: str | None, default: str) -> dict[str, int]:
        """Start or end ids from ``earliest``/``latest``/JSON, or from a timestamp in epoch ms.

        In JSON, ``-2`` means earliest and ``-1`` latest (Kafka's convention); queues the JSON
        does not name start at the earliest id.
        """
        if timestamp is not None:
            try:
                return self.at_time(int(timestamp))
            except ValueError:
                raise OptionError(f"a timestamp option must be epoch ms, not {timestamp!r}") from None
        spec = (spec or default).strip()
        if spec == "earliest":
            return self.earliest()
        if spec == "latest":
            return self.latest()
        try:
            given = decode(spec)
        except json.JSONDecodeError:
            raise OptionError(f"offsets must be earliest, latest or JSON, not {spec!r}") from None
        unknown = set(given) - set(self.paths)
        if unknown:
            raise OptionError(f"offsets name queues that are not read: {sorted(unknown)}")
        out = {}
        for k in self.paths:
            v = given.get(k, -2)
            out[k] = self.view(k).first_id() if v == -2 else self.view(k).tail().id if v == -1 else v
        return out

    def complete(self, ids: Mapping[str, int]) -> dict[str, int]:
        """``ids`` with queues it lacks (added to ``paths`` since) at their earliest id."""
        return {k: ids[k] if k in ids else self.view(k).first_id() for k in self.paths}

    # ------------------------------------------------------------------ admission control
    def cap_rows(self, start: Mapping[str, int], end: dict[str, int], max_rows: int) -> dict[str, int]:
        """Cut ``end`` so that at most ``max_rows`` ids are read in all, shared in proportion to
        what each queue has waiting (and at least one id when anything waits)."""
        avail = {k: max(0, end[k] - start[k]) for k in end}
        total = sum(avail.values())
        if total <= max_rows:
            return end
        take = {k: avail[k] * max_rows // total for k in avail}
        spare = max_rows - sum(take.values())
        for k in sorted(avail, key=lambda k: -avail[k]):
            if spare <= 0:
                break
            if take[k] < avail[k]:
                take[k] += 1
                spare -= 1
        return {k: start[k] + take[k] for k in end}

    def cap_bytes(self, start: Mapping[str, int], end: dict[str, int], max_bytes: int) -> dict[str, int]:
        """Cut ``end`` so that about ``max_bytes`` of records (on-disk size) are read in all."""
        spans = {}
        for k in end:
            if end[k] <= start[k]:
                continue
            v = self.view(k)
            a, b = v.locate(start[k]), v.locate(end[k])
            spans[k] = (a, b, _distance(v, a, b))
        total = sum(s[2] for s in spans.values())
        if total <= max_bytes:
            return end
        out = dict(end)
        for k, (a, b, size) in spans.items():
            budget = max(1, max_bytes * size // total)
            pos = self.views[k].id_after_bytes(a, budget, b)
            out[k] = max(min(pos.id, end[k]), start[k] + 1)
        return out

    # ------------------------------------------------------------------ planning
    def check_loss(self, key: str, start: int) -> int:
        """Where reading queue ``key`` really starts: ``start``, or the earliest id left on
        disk when ``start`` was archived (an error under failOnDataLoss)."""
        first = self.view(key).first_id()
        if start >= first:
            return start
        msg = (
            f"queue {key!r}: ids {start}..{first - 1} are no longer in the journal (archived or "
            "set aside as damaged) but the query needs them"
        )
        if self.fail_on_data_loss:
            raise DataLossError(
                msg + ". Set failOnDataLoss=false to skip them, or register the query as an external "
                "reader (option readerName) so the owner keeps them."
            )
        log.warning("%s; skipped (failOnDataLoss=false)", msg)
        return first

    def plan(self, start: Mapping[str, int], end: Mapping[str, int]) -> list[tuple[str, Segment]]:
        out = []
        for k in sorted(end):
            lo = self.check_loss(k, start.get(k, end[k]))
            if lo >= end[k]:
                continue
            v = self.views[k]
            # the end is past a unit holding ids on both sides of end[k] (locate_end), or its ids
            # below end[k] would be read by neither this batch nor the next
            a, b = v.locate(lo), v.locate_end(end[k])
            if b.id < end[k] and b != v.tail():
                b = v.tail()
            for seg in v.plan(a, Position(b.file, b.offset, end[k]), self.split_bytes):
                out.append((k, attrs.evolve(seg, lo=lo, hi=end[k])))
        return out


def _distance(v: QueueView, a: Position, b: Position) -> int:
    if a.file == b.file:
        return b.offset - a.offset
    total = v.files[a.file].size - a.offset
    for k in range(a.file + 1, b.file):
        total += v.files[k].size - v.files[k].header.size
    return total + b.offset - v.files[b.file].header.size
