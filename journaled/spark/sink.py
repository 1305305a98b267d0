"""The Spark sink: ``df.write.format("journaled")`` and ``df.writeStream.format("journaled")``.

Spark hands each task its rows as Arrow record batches (``DataSourceArrowWriter`` and
``DataSourceStreamArrowWriter``), so no ``Row`` is built per record.  Columns named ``key``
(binary or string), ``headers`` (Kafka's ``array<struct<key: string, value: binary>>``) and
``not_before`` (timestamp), when the written frame has them, become each item's key, headers and
not-before time; the batch is then written as a
spool batch of version 2 (records with metadata).

Exactly once across query restarts: each task frames its partition's ``value`` column into a
spool batch file under ``spool/staging/`` (fsynced, CRC-checked) keyed ``<sinkId>:<batchId>:<partition>``
(the batch id is the local property Spark's micro-batch execution gives its tasks) and returns
its name; the driver's ``commit`` records one intent naming the parts, renames each into the
spool as written (a part keyed otherwise is copied under its key first) and clears the intent.
The owner adopts a key once (owner/adoption.py); a replayed micro-batch finds ``<key>:0``
adopted or spooled and is dropped, or finds the intent of a commit cut short, which it finishes
instead of publishing its own parts.  A failed batch's staged parts are deleted by ``abort``,
which first finishes a publication its ``commit`` began.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
import uuid
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, StringType, StructType, TimestampType

from journaled.spark.schema import OptionError, opt, queue_paths

if TYPE_CHECKING:
    import pyarrow as pa

    from journaled.format.metadata import Meta

# The spool modules (owner/adoption.py and what it imports) are imported where a part is staged
# or published, not here: Spark builds a write's writer in a Python worker of its own, which
# imports this module and no more (tests/spark/test_sink_parts.py).

log = logging.getLogger("journaled.spark")

#: Bytes a task writes into its part between background flushes (see :class:`_EarlyFlush`).
EARLY_FLUSH_BYTES = 8 << 20


@dataclass
class StagedPart(WriterCommitMessage):
    """What a task hands the driver: its staged part file and how many rows it holds."""

    path: str
    rows: int
    with_meta: bool = False
    key: str = ""  # the batch key in the part's header


def _target(options: dict[str, str], schema: StructType, overwrite: bool) -> str:
    if overwrite:
        raise OptionError("a queue can only be appended to: use mode('append')")
    paths = list(queue_paths(options).values())
    if len(paths) != 1:
        raise OptionError("the sink writes to exactly one queue directory")
    fields = {f.name: f.dataType for f in schema.fields}
    if not isinstance(fields.get("value"), (BinaryType, StringType)):
        raise OptionError("the sink needs a 'value' column of type binary or string")
    if "key" in fields and not isinstance(fields["key"], (BinaryType, StringType)):
        raise OptionError("the sink's 'key' column must be binary or string")
    if "not_before" in fields and not isinstance(fields["not_before"], TimestampType):
        raise OptionError("the sink's 'not_before' column must be a timestamp")
    if "headers" in fields and not _is_headers_type(fields["headers"]):
        raise OptionError("the sink's 'headers' column must be array<struct<key: string, value: binary>>")
    return paths[0]


def _is_headers_type(kind: object) -> bool:
    if not isinstance(kind, ArrayType) or not isinstance(kind.elementType, StructType):
        return False
    inner = {f.name: f.dataType for f in kind.elementType.fields}
    return (
        set(inner) == {"key", "value"}
        and isinstance(inner["key"], StringType)
        and isinstance(inner["value"], (BinaryType, StringType))
    )


def has_meta_columns(schema: StructType) -> bool:
    """Whether rows of ``schema`` carry a key, headers or a not-before time for their items."""
    return bool({"key", "headers", "not_before"} & set(schema.fieldNames()))


def _as_binary(col: pa.Array) -> pa.Array:
    """Strings as their UTF-8, which is what Arrow holds: viewed as binary, not encoded again."""
    import pyarrow as pa

    if pa.types.is_string(col.type):
        return col.view(pa.binary())
    if pa.types.is_large_string(col.type):
        return col.view(pa.large_binary())
    return col


def payloads(batches: Iterable[pa.RecordBatch]) -> Iterator[bytes]:
    """The ``value`` column of Arrow batches as bytes (strings as their UTF-8)."""
    for batch in batches:
        col = batch.column("value")
        if col.null_count:
            raise OptionError("the sink's value column holds a null; filter it out first")
        yield from _as_binary(col).to_pylist()


def records(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[bytes, Meta | None]]:
    """``(payload, meta)`` per row: the ``value`` column as :func:`payloads` gives it, and the
    item's key, headers and not-before time from the ``key``, ``headers`` and ``not_before``
    columns where the batch has them (null: none; a not-before time not after now: none, as for a
    put).  A key or headers a put would refuse raise :class:`OptionError`."""
    _meta = _meta_builder()
    for batch in batches:
        names = batch.schema.names
        values = list(payloads([batch]))
        none = [None] * len(values)
        keys = _as_binary(batch.column("key")).to_pylist() if "key" in names else none
        heads = batch.column("headers").to_pylist() if "headers" in names else none
        dues = _epoch_ms(batch.column("not_before")) if "not_before" in names else none
        now_ms = time.time_ns() // 1_000_000
        for value, key, head, due in zip(values, keys, heads, dues):
            yield value, _meta(key, head, due if due is not None and due > now_ms else 0)


_PER_MS = {"s": 0, "ms": 1, "us": 1000, "ns": 1_000_000}


def _epoch_ms(col: pa.Array) -> list[int | None]:
    """A timestamp column as epoch milliseconds (floored), nulls kept."""
    import pyarrow as pa

    per_ms = _PER_MS[col.type.unit]
    raw = col.cast(pa.int64()).to_pylist()
    if per_ms == 0:
        return [None if v is None else v * 1000 for v in raw]
    return [None if v is None else v // per_ms for v in raw]


def _meta_builder() -> Callable[[bytes | None, list[dict[str, object]] | None, int], Meta | None]:
    """The function :func:`records` builds each row's :class:`Meta` with (the metadata modules
    imported once, when a write with metadata columns first runs, not per row)."""
    from journaled.format.metadata import Meta
    from journaled.item import put_headers, put_key

    def meta(key: bytes | None, head: list[dict[str, object]] | None, not_before_ms: int) -> Meta | None:
        if key is None and not head and not not_before_ms:
            return None
        try:
            headers: dict[object, object] = {}
            for h in head or ():
                name, value = h["key"], h["value"]
                if name in headers:
                    raise ValueError(f"header {name!r} given twice")
                headers[name] = value.encode("utf-8") if isinstance(value, str) else value
            return Meta(not_before_ms=not_before_ms, key=put_key(key), headers=put_headers(headers))
        except (TypeError, ValueError) as exc:
            raise OptionError(f"a row's key or headers cannot be stored: {exc}") from None

    return meta


def stage(
    queue_dir: str,
    rows: Iterable[bytes | tuple[bytes, Meta | None]],
    with_meta: bool = False,
    key: str = "",
) -> StagedPart:
    """Executor side: write this task's rows (payloads, or ``(payload, meta)`` pairs) as a
    staged part (not yet visible to the queue) under batch key ``key`` (a placeholder when
    empty); ``with_meta`` writes a version 2 batch."""
    from journaled.owner import adoption

    key = key or _placeholder_key()
    tmp = adoption.new_temp_path(queue_dir, adoption.STAGING)
    writer = adoption.BatchWriter(tmp, key, with_meta=with_meta)
    try:
        for row in rows:
            if isinstance(row, tuple):
                writer.add(row[0], 0, row[1])
            else:
                writer.add(row)
        writer.finish()
    except BaseException:
        writer.discard()
        raise
    return StagedPart(_staged_name(tmp), writer.count, with_meta, key)


def stage_columns(queue_dir: str, batches: Iterable[pa.RecordBatch], key: str = "") -> StagedPart:
    """Executor side, rows without metadata: :func:`stage` for the ``value`` column of Arrow
    batches, framed a batch at a time by Arrow's kernels (record heads from the lengths column,
    joined to the payloads in one call) so that no Python object is built per row."""
    from journaled.owner import adoption

    key = key or _placeholder_key()
    tmp = adoption.new_temp_path(queue_dir, adoption.STAGING)
    writer = adoption.BatchWriter(tmp, key)
    try:
        with _EarlyFlush(tmp) as flush:
            for batch in batches:
                framed, count = _framed(batch)
                writer.add_framed(framed, count)
                flush.wrote(len(framed))
        writer.finish()
    except BaseException:
        writer.discard()
        raise
    return StagedPart(_staged_name(tmp), writer.count, False, key)


class _EarlyFlush:
    """Write a staged part's bytes to disk in the background while the task still receives
    batches: every :data:`EARLY_FLUSH_BYTES`, an ``fdatasync`` in a thread (it releases the GIL)
    on a descriptor of its own, so that the fsync of ``BatchWriter.finish`` -- still what makes
    the part durable -- finds little left to write, instead of the whole part at the task's end
    with nothing else going on.  Large framed writes go straight past the writer's buffer to the
    file, so what was written is there for the sync; a smaller tail is left to ``finish``."""

    def __init__(self, path: str) -> None:
        from journaled.disk import fileio

        self._ops = fileio.ops
        self._fd = self._ops.open(path, os.O_RDONLY)
        self._pending = 0
        self._thread: threading.Thread | None = None

    def __enter__(self) -> _EarlyFlush:
        return self

    def wrote(self, n: int) -> None:
        """Note ``n`` more bytes written; start a flush past the threshold (one at a time)."""
        self._pending += n
        if self._pending < EARLY_FLUSH_BYTES or (self._thread is not None and self._thread.is_alive()):
            return
        self._pending = 0
        self._thread = threading.Thread(target=self._sync, name="journaled-sink-flush", daemon=True)
        self._thread.start()

    def _sync(self) -> None:
        with contextlib.suppress(OSError):  # an early flush only: finish's fsync reports failure
            self._ops.fdatasync(self._fd)

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._thread.join()
        self._ops.close(self._fd)


def _framed(batch: pa.RecordBatch) -> tuple[memoryview, int]:
    """The ``value`` column of ``batch`` as version 1 spool records, one buffer."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from journaled.format import spoolbatch

    col = batch.column("value")
    if col.null_count:
        raise OptionError("the sink's value column holds a null; filter it out first")
    col = _as_binary(col)
    if pa.types.is_large_binary(col.type):
        try:
            col = col.cast(pa.binary())
        except pa.ArrowInvalid:
            raise OptionError("a batch of the sink's value column holds over 2 GiB") from None
    n = len(col)
    if n == 0:
        return memoryview(b""), 0
    lengths = array("i")
    lengths.frombytes(_int32s(pc.binary_length(col), n))
    heads = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(12), n, [None, pa.py_buffer(spoolbatch.record_heads(lengths))]
    )
    joined = pc.binary_join_element_wise(heads.cast(pa.binary()), col, pa.scalar(b"", pa.binary()))
    bounds = array("i")
    bounds.frombytes(_int32s(joined, n + 1, buffer=1))
    return memoryview(joined.buffers()[2])[bounds[0] : bounds[-1]], n


def _int32s(col: pa.Array, n: int, buffer: int = 1) -> memoryview:
    """``n`` int32 values of one of ``col``'s buffers (its values, or a binary column's offsets),
    from the column's own offset."""
    raw = col.buffers()[buffer]
    return memoryview(raw)[col.offset * 4 : (col.offset + n) * 4]


def _placeholder_key() -> str:
    # outside a Spark task (or without the batch id) the driver gives the part its key on commit
    return f"part:{uuid.uuid4().hex}"


def _staged_name(tmp: str) -> str:
    final = tmp.replace(os.sep + ".", os.sep).removesuffix(".tmp") + ".part"
    os.rename(tmp, final)
    return final


def task_key(base: str | None) -> str:
    """The key a task gives its part: ``<base>:<partition id>``, which the driver publishes as it
    is; a placeholder outside a Spark task or without ``base``."""
    if base is None:
        return ""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return f"{base}:{ctx.partitionId()}" if ctx is not None else ""


def publish(queue_dir: str, messages: Sequence[WriterCommitMessage | None], key: str) -> bool:
    """Driver side: deliver the staged parts as spool batches ``<key>:0``, ``<key>:1``, ...,
    each renamed into the spool as the task wrote it, all under one intent.  The batch is
    published once: a key already adopted or spooled is dropped, and a publication cut short
    (a crash between the renames) is finished by the replay, whose own parts are dropped.
    Returns whether this call published the batch."""
    from journaled.disk import intents
    from journaled.owner import adoption

    parts = [m for m in messages if isinstance(m, StagedPart)]
    if _finish(queue_dir, key):
        log.info("batch %r was being published; finished it and dropped its replay", key)
        discard(parts)
        return False
    if parts and _published(queue_dir, key):
        log.info("batch %r was published before; dropping its replay", key)
        discard(parts)
        return False
    try:
        keyed = [_keyed(queue_dir, part, f"{key}:{i}") for i, part in enumerate(parts)]
    except BaseException:
        discard(parts)
        raise
    # part 0 always goes (it is what marks the batch published); empty others need not
    keyed = [p for i, p in enumerate(keyed) if i == 0 or p.rows or discard([p])]
    intents.write_intent(queue_dir, key, [p.path for p in keyed])
    for part in keyed:
        with contextlib.suppress(FileNotFoundError):  # the owner finished a stale intent of ours
            adoption.publish(part.path, queue_dir)
    intents.clear_intent(queue_dir, key)
    return True


def _finish(queue_dir: str, key: str) -> bool:
    """Rename into the spool what an unfinished publication of ``key`` left staged; whether
    there was one.  Its parts are then the batch, whatever a replay of it holds."""
    from journaled.disk import intents
    from journaled.owner import adoption

    unfinished = intents.read_intent(queue_dir, key)
    if unfinished is None:
        return False
    for path in unfinished:
        with contextlib.suppress(FileNotFoundError):  # renamed by the owner meanwhile
            adoption.publish(path, queue_dir)
    intents.clear_intent(queue_dir, key)
    return True


def abandon(queue_dir: str, messages: Sequence[WriterCommitMessage | None], key: str) -> None:
    """Driver side, after a failed batch: delete its staged parts, except that a publication
    ``commit`` began is completed first (some of its parts may already be adopted: the batch is
    then delivered whole rather than in part)."""
    from journaled.disk import intents

    begun = set(intents.read_intent(queue_dir, key) or ())
    discard([m for m in messages if not (isinstance(m, StagedPart) and m.path in begun)])
    _finish(queue_dir, key)


def _published(queue_dir: str, key: str) -> bool:
    from journaled.owner import adoption

    # ``key`` alone is how batches were keyed when the driver joined the parts into one
    keys = {key, f"{key}:0"}
    ledger = adoption.Ledger(adoption.spool_dir(queue_dir))
    if any(ledger.adopted(k) for k in keys):
        return True
    return any(adoption.read_batch_key(p) in keys for p in adoption.pending_batches(queue_dir))


def _keyed(queue_dir: str, part: StagedPart, key: str) -> StagedPart:
    """``part`` under batch key ``key``: as it is when the task wrote that key, else copied."""
    from journaled.owner import adoption

    if part.key == key:
        return part
    _, records = adoption.read_batch(part.path)
    rows = [(payload, meta) for payload, _, meta in records]
    copy = stage(queue_dir, rows, part.with_meta, key)
    discard([part])
    return copy


def discard(parts: Sequence[WriterCommitMessage | None]) -> bool:
    """Delete the staged files of ``parts`` (those already gone are skipped); returns False."""
    for m in parts:
        if isinstance(m, StagedPart):
            try:
                os.unlink(m.path)
            except FileNotFoundError:
                pass
    return False


def sink_id(options: dict[str, str]) -> str:
    """The name that makes batch keys unique per query: option ``sinkId``, else derived from
    the ``checkpointLocation`` option (stable across restarts of one query)."""
    given = opt(options, "sinkId")
    if given:
        return given
    cp = opt(options, "checkpointLocation")
    if cp:
        return "cp-" + hashlib.sha256(os.path.abspath(cp).encode()).hexdigest()[:16]
    raise OptionError(
        "a streaming write to journaled needs option('sinkId', ...) or option('checkpointLocation', ...) "
        "so that a replayed batch can be recognised"
    )


def _batch_key(sink: str) -> str | None:
    """``<sinkId>:<batchId>`` of the micro-batch this task writes, from the batch id Spark's
    micro-batch execution sets as a local property of its jobs (None where it is not set)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
    return f"{sink}:{batch}" if batch is not None else None


class JournaledBatchWriter(DataSourceArrowWriter):
    """``df.write``: all rows of the job become visible at once, or none."""

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        self.queue_dir = _target(options, schema, overwrite)
        self.key = f"write:{uuid.uuid4().hex}"
        self.with_meta = has_meta_columns(schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        key = task_key(self.key)
        if self.with_meta:
            return stage(self.queue_dir, records(iterator), True, key)
        return stage_columns(self.queue_dir, iterator, key)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        publish(self.queue_dir, messages, self.key)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        abandon(self.queue_dir, messages, self.key)


class JournaledStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream``: one spool batch per micro-batch, keyed ``<sinkId>:<batchId>``."""

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        # Spark says "overwrite" for outputMode("complete"): each micro-batch then carries the
        # whole result table, which we append as one snapshot (a queue cannot be truncated).
        self.queue_dir = _target(options, schema, False)
        self.sink_id = sink_id(options)
        self.with_meta = has_meta_columns(schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        key = task_key(_batch_key(self.sink_id))
        if self.with_meta:
            return stage(self.queue_dir, records(iterator), True, key)
        return stage_columns(self.queue_dir, iterator, key)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        publish(self.queue_dir, messages, f"{self.sink_id}:{batchId}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        abandon(self.queue_dir, messages, f"{self.sink_id}:{batchId}")
