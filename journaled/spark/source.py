"""The Spark source: ``spark.read.format("journaled")`` and ``spark.readStream.format(...)``.

Driver side: a :class:`~journaled.spark.offsets.Planner` turns offsets into segments (byte
ranges of journal files, see offline/segments.py); each segment is one Spark partition.  Executor side:
:func:`read_partition` decodes a segment and yields Arrow record batches.  A streaming query
keeps an external-reader bookmark (disk/bookmarks.py) in each queue so the owner does not archive
what the query still needs; it moves on ``commit(end)``.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import attrs
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from journaled.disk.bookmarks import write_bookmark
from journaled.offline.segments import Gap, Segment
from journaled.spark.offsets import (
    SCHEMA_DDL,
    DataLossError,
    OptionError,
    Planner,
    check_columns,
    decode,
    encode,
    opt,
    opt_bool,
    opt_duration_ms,
    opt_int,
    opt_int_alias,
    queue_paths,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from journaled.spark.arrowread import ArrowColumns

log = logging.getLogger("journaled.spark")

__all__ = ["SCHEMA_DDL", "JournaledBatchReader", "JournaledPartition", "JournaledStreamReader"]

ROWS_PER_BATCH = 32768


class JournaledPartition(InputPartition):
    """Consecutive segments of one queue (picklable; everything ``read`` needs travels inside).

    Segments are cut at journal file boundaries (offline/segments.py); a partition packs as many as
    fit ``maxPartitionBytes``, as Spark's file sources pack small files, because every Spark
    task costs a fixed tens of milliseconds (scheduling, the Python worker round trip)."""

    def __init__(self, key: str, segments: Sequence[Segment], fail_on_data_loss: bool) -> None:
        super().__init__((key, tuple((s.path, s.start, s.end) for s in segments)))
        self.key = key
        self.segments = list(segments)
        self.fail_on_data_loss = fail_on_data_loss


#: The smallest partition worth a task of its own when spreading a range over ``minPartitions``
#: (Spark's ``spark.sql.files.openCostInBytes``): a task costs tens of milliseconds.
MIN_PACK_BYTES = 4 << 20


def _planner(options: dict[str, str]) -> Planner:
    split = opt_int(options, "maxPartitionBytes")
    p = Planner(queue_paths(options), opt_bool(options, "failOnDataLoss", True))
    if split:
        p.split_bytes = split
    # Spark's file sources spread a read over the cluster's cores (defaultParallelism), which a
    # Python source cannot ask; this host's core count is right for local mode.
    p.min_partitions = opt_int(options, "minPartitions") or os.cpu_count() or 1
    return p


def _partitions(planner: Planner, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
    out: list[InputPartition] = []
    group: list[Segment] = []
    key, size = "", 0
    planned = planner.plan(start, end)
    # Packing only: segments are still cut where they were (file ends, maxPartitionBytes), so
    # spreading a read over more tasks never adds a start to probe for inside a file.
    # Weighed by the records a task decodes (seg.work), not bytes on disk: a compressed stretch
    # holds several times its size, and packing it by size left one core with most of the work.
    total = sum(seg.work for _, seg in planned)
    target = min(planner.split_bytes, max(MIN_PACK_BYTES, -(-total // planner.min_partitions)))
    # A compressed stretch may be cut anywhere (it is probed anyway), so it is cut to a share that
    # makes the partitions' count a multiple of minPartitions: no core left with a last big task.
    rounds = -(-total // (planner.min_partitions * planner.split_bytes))
    share = min(
        planner.split_bytes, max(MIN_PACK_BYTES, -(-total // (planner.min_partitions * max(1, rounds))))
    )
    planned = _shares(_whole_files(planned), share)
    for k, seg in planned:
        if group and (k != key or size >= target or size + seg.work > planner.split_bytes):
            out.append(JournaledPartition(key, group, planner.fail_on_data_loss))
            group, size = [], 0
        group.append(seg)
        key, size = k, size + seg.work
    if group:
        out.append(JournaledPartition(key, group, planner.fail_on_data_loss))
    return out


def _whole_files(planned: list[tuple[str, Segment]]) -> list[tuple[str, Segment]]:
    """``planned`` with the consecutive pieces of one compressed file joined (:func:`_shares`
    cuts them again, to the share of the whole read)."""
    out: list[tuple[str, Segment]] = []
    for k, seg in planned:
        if out and seg.work > seg.end - seg.start:
            pk, prev = out[-1]
            if (
                pk == k
                and prev.path == seg.path
                and prev.end == seg.start
                and prev.work > prev.end - prev.start
            ):
                out[-1] = (k, attrs.evolve(prev, end=seg.end, work=prev.work + seg.work))
                continue
        out.append((k, seg))
    return out


def _shares(planned: list[tuple[str, Segment]], share: int) -> list[tuple[str, Segment]]:
    """``planned`` with each compressed stretch (its work more than its bytes) cut where the
    running total of work passes a multiple of ``share`` (a cut within a twentieth of a share of
    either end is left out): packing then makes partitions of about ``share`` each."""
    out: list[tuple[str, Segment]] = []
    acc, slack = 0, share // 20
    for k, seg in planned:
        size = seg.end - seg.start
        if seg.work <= size:
            out.append((k, seg))
            acc += seg.work
            continue
        cuts = [seg.start]
        c = (acc // share + 1) * share
        while c < acc + seg.work - slack:
            if c - acc > slack:
                cuts.append(seg.start + size * (c - acc) // seg.work)
            c += share
        cuts.append(seg.end)
        for i, (a, b) in enumerate(zip(cuts, cuts[1:])):
            out.append(
                (
                    k,
                    attrs.evolve(
                        seg, start=a, end=b, exact=seg.exact and i == 0, work=seg.work * (b - a) // size
                    ),
                )
            )
        acc += seg.work
    return out


def check_schema(schema: StructType) -> None:
    """Refuse a schema the source cannot fill (one the query named may hold any of the
    source's columns, in any order: offsets.check_columns)."""
    check_columns([(f.name, f.dataType.simpleString(), f.nullable) for f in schema.fields])


def read_partition(part: JournaledPartition, schema: StructType) -> Iterator[pa.RecordBatch]:
    """Decode one partition into Arrow batches of ``schema``, the source's or the query's own
    (columns built from buffers by arrowread.py: no Python object per record; a column the
    schema leaves out is never built)."""
    # Imported here, in the executor's task: the Python workers Spark starts to plan a query
    # (and to drive a stream reader) never read, and pyarrow.compute alone costs ~0.1 s there.
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    from journaled.spark.arrowread import read_segment_arrays

    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    ts_type = pa.timestamp("us", tz="UTC")  # what to_arrow_schema makes of TIMESTAMP
    queue = _QueueColumn(pa.scalar(part.key, pa.string()))
    gaps: list[Gap] = []
    for cols in (c for seg in part.segments for c in read_segment_arrays(seg, gaps, ROWS_PER_BATCH)):
        if gaps:
            _on_gaps(part, gaps)
        arrays = [_build_column(name.lower(), cols, ts_type, queue) for name in arrow_schema.names]
        yield pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)
    if gaps:
        _on_gaps(part, gaps)


class _QueueColumn:
    """The ``queue`` column of one partition's batches: the key repeated, built once for a whole
    batch and sliced (no copy) for each (perf: ``pa.repeat`` per batch copied the string per row)."""

    def __init__(self, key: pa.Scalar) -> None:
        self.key = key
        self.full: pa.Array | None = None

    def __call__(self, n: int) -> pa.Array:
        import pyarrow as pa

        if self.full is None or len(self.full) < n:
            self.full = pa.repeat(self.key, max(n, ROWS_PER_BATCH))
        return self.full.slice(0, n)


def _build_column(name: str, cols: ArrowColumns, ts_type: pa.DataType, queue: _QueueColumn) -> pa.Array:
    """Column ``name`` of the source schema for one decoded batch."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if name == "id":
        return cols.ids
    if name == "value":
        return cols.values
    if name == "timestamp":
        return pc.multiply(cols.add_ms, 1000).cast(ts_type)
    if name == "expire_at":
        if not len(cols) or pc.max(cols.expire_ms).as_py() == 0:  # no row expires: all null
            return pa.nulls(len(cols), ts_type)
        return pc.if_else(pc.equal(cols.expire_ms, 0), None, pc.multiply(cols.expire_ms, 1000)).cast(ts_type)
    if name == "queue":
        return queue(len(cols))
    if name == "key":
        return cols.keys()
    if name == "not_before":
        return pc.multiply(cols.not_before_ms(), 1000).cast(ts_type)
    if name == "headers":
        return cols.headers()
    raise OptionError(f"the journaled source has no column {name!r}")


def _on_gaps(part: JournaledPartition, gaps: list[Gap]) -> None:
    for g in gaps:
        msg = f"queue {part.key!r}: {g.reason} in {g.path} at offset {g.offset}; ids {g.lo}..{g.hi - 1} lost"
        if part.fail_on_data_loss:
            raise DataLossError(msg + " (set failOnDataLoss=false to skip them)")
        log.warning("%s; skipped (failOnDataLoss=false)", msg)
    gaps.clear()


# ------------------------------------------------------------------ filter pushdown (batch reads)
# Spark (>= 4.1, with spark.sql.python.filterPushdown.enabled) hands a batch reader the
# conjuncts of a query's ``where`` it can express.  Ids are consecutive per queue and add times
# never decrease along them (the journal clamps them), so a range of either is a range of ids,
# which the planner turns into journal files and byte ranges before anything is read.
#
# ``id`` comparisons are applied exactly and not handed back to Spark.  ``timestamp`` ones are
# widened to whole milliseconds (the precision of add times) and handed back, so Spark still
# applies them exactly: a naive ``datetime`` (what PySpark gives for a timestamp literal) is read
# as local time, taking both readings of an hour the clock repeats.

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_MS = dt.timedelta(milliseconds=1)


@attrs.define
class Bounds:
    """What the pushed filters allow: ids in ``[id_lo, id_hi)``, add times in ``[ms_lo, ms_hi)``
    (epoch ms); ``None`` is unbounded."""

    id_lo: int | None = None
    id_hi: int | None = None
    ms_lo: int | None = None
    ms_hi: int | None = None

    def ids(self, lo: int, hi: int) -> tuple[int, int]:
        """``[lo, hi)`` narrowed to the id bounds (empty as ``lo == hi``)."""
        if self.id_lo is not None:
            lo = max(lo, self.id_lo)
        if self.id_hi is not None:
            hi = min(hi, self.id_hi)
        return lo, max(lo, hi)


def _lower(current: int | None, new: int) -> int:
    return new if current is None else max(current, new)


def _upper(current: int | None, new: int) -> int:
    return new if current is None else min(current, new)


def _ms_range(when: dt.datetime) -> tuple[int, int]:
    """The epoch ms a timestamp literal can stand for: (earliest, latest), both floored."""
    if when.tzinfo is not None:
        readings = [when]
    else:  # local time; in the hour a clock repeats, fold 0 and 1 are an hour apart
        readings = [when.replace(fold=0).astimezone(), when.replace(fold=1).astimezone()]
    ms = [(r - _EPOCH) // _MS for r in readings]
    return min(ms), max(ms)


def _column(f: Filter) -> str | None:
    attr = getattr(f, "attribute", None)
    if isinstance(attr, tuple) and len(attr) == 1 and isinstance(attr[0], str):
        return attr[0].lower()
    return None


def _is_id(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def push(filters: Sequence[Filter], bounds: Bounds) -> list[Filter]:
    """Narrow ``bounds`` by what ``filters`` allow; return the filters Spark must still apply."""
    keep = []
    for f in filters:
        col = _column(f)
        if col == "id" and _push_id(f, bounds):
            continue
        if col == "timestamp":
            _push_time(f, bounds)
        keep.append(f)
    return keep


def _push_id(f: Filter, b: Bounds) -> bool:
    """Narrow the id range by ``f``; whether it is then applied exactly."""
    value = getattr(f, "value", None)
    if isinstance(f, In):
        values = list(f.value)
        if values and all(_is_id(v) for v in values):
            b.id_lo, b.id_hi = _lower(b.id_lo, min(values)), _upper(b.id_hi, max(values) + 1)
        return False  # the ids between the listed ones are still read: Spark drops them
    if not _is_id(value):
        return False
    assert isinstance(value, int)
    if isinstance(f, EqualTo):
        b.id_lo, b.id_hi = _lower(b.id_lo, value), _upper(b.id_hi, value + 1)
    elif isinstance(f, GreaterThan):
        b.id_lo = _lower(b.id_lo, value + 1)
    elif isinstance(f, GreaterThanOrEqual):
        b.id_lo = _lower(b.id_lo, value)
    elif isinstance(f, LessThan):
        b.id_hi = _upper(b.id_hi, value)
    elif isinstance(f, LessThanOrEqual):
        b.id_hi = _upper(b.id_hi, value + 1)
    else:
        return False
    return True


def _push_time(f: Filter, b: Bounds) -> None:
    value = getattr(f, "value", None)
    if not isinstance(value, dt.datetime) or not isinstance(
        f, (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)
    ):
        return
    earliest, latest = _ms_range(value)
    if isinstance(f, (EqualTo, GreaterThan, GreaterThanOrEqual)):
        b.ms_lo = _lower(b.ms_lo, earliest)
    if isinstance(f, (EqualTo, LessThan, LessThanOrEqual)):
        b.ms_hi = _upper(b.ms_hi, latest + 1)


class JournaledBatchReader(DataSourceReader):
    """``spark.read``: ids from ``startingOffsets`` (default earliest) to ``endingOffsets``
    (default latest), fixed when the query is planned."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        check_schema(schema)
        self.schema = schema
        self.planner = _planner(options)
        self.start = self.planner.resolve(
            opt(options, "startingOffsets"), opt(options, "startingTimestamp"), "earliest"
        )
        self.end = self.planner.resolve(
            opt(options, "endingOffsets"), opt(options, "endingTimestamp"), "latest"
        )

    def partitions(self) -> Sequence[InputPartition]:
        return _partitions(self.planner, self.start, self.end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, JournaledPartition):
            return iter(())  # Spark's stand-in partition when there is nothing to read
        return read_partition(partition, self.schema)


class JournaledPushdownReader(JournaledBatchReader):
    """``spark.read`` with option ``filterPushdown`` true: also takes the query's filters.

    A class of its own because Spark refuses to run a reader that implements ``pushFilters``
    while ``spark.sql.python.filterPushdown.enabled`` is false (the default), and the source
    cannot see that setting."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Narrow the ids read to what ``id`` and ``timestamp`` conditions allow (:func:`push`),
        when Spark pushes filters (``spark.sql.python.filterPushdown.enabled``)."""
        bounds = Bounds()
        keep = push(filters, bounds)
        for k in self.planner.paths:
            lo, hi = bounds.ids(self.start[k], self.end[k])
            if bounds.ms_lo is not None:
                lo = max(lo, self.planner.view(k).locate_time(bounds.ms_lo))
            if bounds.ms_hi is not None:
                hi = min(hi, self.planner.view(k).locate_time(bounds.ms_hi))
            self.start[k], self.end[k] = lo, max(lo, hi)
        return keep


class JournaledStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: micro-batches of new ids, with admission control.

    ``minOffsetsPerTrigger``/``maxTriggerDelay`` are applied here, as Kafka's source does: the
    Python API passes Spark one read limit only (no ``CompositeReadLimit``), and its
    ``ReadMinRows`` carries no delay.
    """

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        check_schema(schema)
        self.options = dict(options)
        self.schema = schema
        self.planner = _planner(options)
        self.max_rows = opt_int_alias(options, "maxRecordsPerTrigger", "maxOffsetsPerTrigger")
        self.max_bytes = opt_int(options, "maxBytesPerTrigger")
        self.min_rows = opt_int_alias(options, "minRecordsPerTrigger", "minOffsetsPerTrigger")
        self.max_delay_s = opt_duration_ms(options, "maxTriggerDelay", "15m") / 1000
        self.last_trigger = float("-inf")  # like Kafka: the first batch is never held back
        self.reader_name = opt(options, "readerName", "spark") or None
        self.target: dict[str, int] | None = None  # set by Trigger.AvailableNow
        self._bookmarked = False
        self._heads: dict[str, int] = {}  # what each queue's bookmark says, as last written

    # -- offsets
    def initialOffset(self) -> dict[str, Any]:
        o = self.options
        return encode(self.planner.resolve(opt(o, "startingOffsets"), opt(o, "startingTimestamp"), "latest"))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_rows:
            return ReadMaxRows(self.max_rows)
        if self.max_bytes:
            return ReadMaxBytes(self.max_bytes)
        if self.min_rows:
            return ReadMinRows(self.min_rows)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self.planner.latest()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = self.planner.complete(decode(start))
        # Spark plans the next batch only once the one ending at ``start`` is in its commit log
        # (batches run one at a time), so the query will never read before ``start`` again.
        self._bookmark(begin)
        if not self.planner.fail_on_data_loss:  # jump over archived ids instead of crawling
            begin = {k: max(v, self.planner.view(k).first_id()) for k, v in begin.items()}
        end = self.target if self.target is not None else self.planner.latest()
        end = {k: max(begin[k], end.get(k, begin[k])) for k in begin}
        if self._hold_back(begin, end, limit):
            return encode(begin)  # end == start: Spark plans no batch this trigger
        if isinstance(limit, ReadMaxRows):
            end = self.planner.cap_rows(begin, end, limit.max_rows)
        elif isinstance(limit, ReadMaxBytes):
            end = self.planner.cap_bytes(begin, end, limit.max_bytes)
        return encode(end)

    def _hold_back(self, begin: dict[str, int], end: dict[str, int], limit: ReadLimit) -> bool:
        """Whether to wait for ``minOffsetsPerTrigger`` ids (Kafka's rule): yes while fewer wait
        and less than ``maxTriggerDelay`` has passed since the last batch.  Never under
        ``Trigger.AvailableNow``, which must end, nor when Spark asks for everything."""
        if self.target is not None or isinstance(limit, ReadAllAvailable):
            return False
        min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else self.min_rows
        if not min_rows:
            return False
        now = time.monotonic()
        if now - self.last_trigger < self.max_delay_s and sum(end[k] - begin[k] for k in end) < min_rows:
            return True
        self.last_trigger = now
        return False

    def reportLatestOffset(self) -> dict[str, Any]:
        return encode(self.planner.latest())

    # -- planning and reading
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin = self.planner.complete(decode(start))
        if not self._bookmarked:
            self._bookmark(begin)  # from now on the owner keeps what this query needs
            self._bookmarked = True
        return _partitions(self.planner, begin, decode(end))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, JournaledPartition):
            return iter(())  # Spark's stand-in partition when there is nothing to read
        return read_partition(partition, self.schema)

    # -- retention
    def commit(self, end: dict[str, Any]) -> None:
        # Spark calls this for a batch only once the *next* batch is planned; latestOffset has
        # moved the bookmark there already, so this only matters if Spark ever calls it first.
        self._bookmark(decode(end))

    def _bookmark(self, ids: dict[str, int]) -> None:
        if not self.reader_name:
            return
        for k, head in ids.items():
            if k in self.planner.paths and self._heads.get(k) != head:
                try:
                    write_bookmark(self.planner.paths[k], self.reader_name, head)
                except OSError as exc:  # a read-only share: the query still works
                    log.warning("could not write bookmark in %s: %s", self.planner.paths[k], exc)
                self._heads[k] = head  # tried: warn again only when the head moves

    def stop(self) -> None:
        pass
