"""The Spark source: ``spark.read.format("journaled")`` and ``spark.readStream.format(...)``.

Driver side: a :class:`~journaled.spark.offsets.Planner` turns offsets into segments (byte
ranges of journal files, see offline/segments.py); each segment is one Spark partition.  Executor side:
:func:`read_partition` decodes a segment and yields Arrow record batches.  A streaming query
keeps an external-reader bookmark (disk/bookmarks.py) in each queue so the owner does not archive
what the query still needs; it moves on ``commit(end)``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
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
    Planner,
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
    total = sum(seg.end - seg.start for _, seg in planned)
    target = min(planner.split_bytes, max(MIN_PACK_BYTES, -(-total // planner.min_partitions)))
    for k, seg in planned:
        if group and (k != key or size >= target or size + seg.end - seg.start > planner.split_bytes):
            out.append(JournaledPartition(key, group, planner.fail_on_data_loss))
            group, size = [], 0
        group.append(seg)
        key, size = k, size + seg.end - seg.start
    if group:
        out.append(JournaledPartition(key, group, planner.fail_on_data_loss))
    return out


def read_partition(part: JournaledPartition, schema: StructType) -> Iterator[pa.RecordBatch]:
    """Decode one partition into Arrow batches of the source schema (columns built from
    buffers by arrowread.py: no Python object per record)."""
    # Imported here, in the executor's task: the Python workers Spark starts to plan a query
    # (and to drive a stream reader) never read, and pyarrow.compute alone costs ~0.1 s there.
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql.pandas.types import to_arrow_schema

    from journaled.spark.arrowread import read_segment_arrays

    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    ts_type = arrow_schema.field("timestamp").type
    key = pa.scalar(part.key, pa.string())
    gaps: list[Gap] = []
    for cols in (c for seg in part.segments for c in read_segment_arrays(seg, gaps, ROWS_PER_BATCH)):
        if gaps:
            _on_gaps(part, gaps)
        added = pc.multiply(cols.add_ms, 1000).cast(ts_type)
        expire_ms = cols.expire_ms
        expire_at = pc.if_else(pc.equal(expire_ms, 0), None, pc.multiply(expire_ms, 1000)).cast(ts_type)
        yield pa.RecordBatch.from_arrays(
            [cols.ids, cols.values, added, expire_at, pa.repeat(key, len(cols))],
            schema=arrow_schema,
        )
    if gaps:
        _on_gaps(part, gaps)


def _on_gaps(part: JournaledPartition, gaps: list[Gap]) -> None:
    for g in gaps:
        msg = f"queue {part.key!r}: {g.reason} in {g.path} at offset {g.offset}; ids {g.lo}..{g.hi - 1} lost"
        if part.fail_on_data_loss:
            raise DataLossError(msg + " (set failOnDataLoss=false to skip them)")
        log.warning("%s; skipped (failOnDataLoss=false)", msg)
    gaps.clear()


class JournaledBatchReader(DataSourceReader):
    """``spark.read``: ids from ``startingOffsets`` (default earliest) to ``endingOffsets``
    (default latest), fixed when the query is planned."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
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


class JournaledStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: micro-batches of new ids, with admission control.

    ``minOffsetsPerTrigger``/``maxTriggerDelay`` are applied here, as Kafka's source does: the
    Python API passes Spark one read limit only (no ``CompositeReadLimit``), and its
    ``ReadMinRows`` carries no delay.
    """

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
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
