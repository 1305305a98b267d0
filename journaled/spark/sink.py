"""The Spark sink: ``df.write.format("journaled")`` and ``df.writeStream.format("journaled")``.

Spark hands each task its rows as Arrow record batches (``DataSourceArrowWriter`` and
``DataSourceStreamArrowWriter``), so no ``Row`` is built per record.  Columns named ``key``
(binary or string), ``headers`` (Kafka's ``array<struct<key: string, value: binary>>``) and
``not_before`` (timestamp), when the written frame has them, become each item's key, headers and
not-before time; the batch is then written as a
spool batch of version 2 (records with metadata).

Exactly once across query restarts: each task stages its partition's rows as a spool batch
file under ``spool/staging/`` (fsynced, CRC-checked) and returns its name; the driver's
``commit`` joins the parts into one spool batch keyed by the sink and the batch id, published by
one atomic rename (owner/adoption.py).  The owner adopts a key once, so a micro-batch that Spark replays
after a crash is dropped instead of delivered twice.  A failed or aborted batch only leaves
staged parts, which ``abort`` deletes.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, StringType, StructType, TimestampType

from journaled.format.metadata import Meta
from journaled.item import put_headers, put_key
from journaled.owner import adoption
from journaled.spark.offsets import OptionError, opt, queue_paths

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("journaled.spark")


@dataclass
class StagedPart(WriterCommitMessage):
    """What a task hands the driver: its staged part file and how many rows it holds."""

    path: str
    rows: int
    with_meta: bool = False


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


def _meta(key: bytes | None, head: list[dict[str, object]] | None, not_before_ms: int) -> Meta | None:
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


def stage(
    queue_dir: str, rows: Iterable[bytes | tuple[bytes, Meta | None]], with_meta: bool = False
) -> StagedPart:
    """Executor side: write this task's rows (payloads, or ``(payload, meta)`` pairs) as a
    staged part (not yet visible to the queue); ``with_meta`` writes a version 2 batch."""
    tmp = adoption.new_temp_path(queue_dir, adoption.STAGING)
    writer = adoption.BatchWriter(tmp, "part", with_meta=with_meta)
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
    final = tmp.replace(os.sep + ".", os.sep).removesuffix(".tmp") + ".part"
    os.rename(tmp, final)
    return StagedPart(final, writer.count, with_meta)


def publish(queue_dir: str, messages: Sequence[WriterCommitMessage | None], key: str) -> bool:
    """Driver side: deliver every staged part as one spool batch named ``key`` (atomically);
    a key already adopted is not delivered again.  Returns whether it was published."""
    parts = [m for m in messages if isinstance(m, StagedPart)]
    if adoption.Ledger(adoption.spool_dir(queue_dir)).adopted(key) or _spooled(queue_dir, key):
        log.info("batch %r was published before; dropping its replay", key)
        discard(parts)
        return False
    tmp = adoption.new_temp_path(queue_dir)
    writer = adoption.BatchWriter(tmp, key, with_meta=any(p.with_meta for p in parts))
    try:
        for part in parts:
            _, staged = adoption.read_batch(part.path)
            for payload, expire_ms, meta in staged:
                writer.add(payload, expire_ms, meta)
        writer.finish()
    except BaseException:
        writer.discard()
        raise
    adoption.publish(tmp, queue_dir)
    discard(parts)
    return True


def _spooled(queue_dir: str, key: str) -> bool:
    return any(adoption.read_batch_key(p) == key for p in adoption.pending_batches(queue_dir))


def discard(parts: Sequence[WriterCommitMessage | None]) -> None:
    for m in parts:
        if isinstance(m, StagedPart):
            try:
                os.unlink(m.path)
            except FileNotFoundError:
                pass


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


class JournaledBatchWriter(DataSourceArrowWriter):
    """``df.write``: all rows of the job become visible at once, or none."""

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        self.queue_dir = _target(options, schema, overwrite)
        self.key = f"write:{uuid.uuid4().hex}"
        self.with_meta = has_meta_columns(schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        if self.with_meta:
            return stage(self.queue_dir, records(iterator), True)
        return stage(self.queue_dir, payloads(iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        publish(self.queue_dir, messages, self.key)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        discard(messages)


class JournaledStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream``: one spool batch per micro-batch, keyed ``<sinkId>:<batchId>``."""

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        # Spark says "overwrite" for outputMode("complete"): each micro-batch then carries the
        # whole result table, which we append as one snapshot (a queue cannot be truncated).
        self.queue_dir = _target(options, schema, False)
        self.sink_id = sink_id(options)
        self.with_meta = has_meta_columns(schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        if self.with_meta:
            return stage(self.queue_dir, records(iterator), True)
        return stage(self.queue_dir, payloads(iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        publish(self.queue_dir, messages, f"{self.sink_id}:{batchId}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        discard(messages)
