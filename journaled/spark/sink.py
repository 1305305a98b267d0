"""The Spark sink: ``df.write.format("journaled")`` and ``df.writeStream.format("journaled")``.

Spark hands each task its rows as Arrow record batches (``DataSourceArrowWriter`` and
``DataSourceStreamArrowWriter``), so no ``Row`` is built per record.

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
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

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


def _target(options: dict[str, str], schema: StructType, overwrite: bool) -> str:
    if overwrite:
        raise OptionError("a queue can only be appended to: use mode('append')")
    paths = list(queue_paths(options).values())
    if len(paths) != 1:
        raise OptionError("the sink writes to exactly one queue directory")
    field = next((f for f in schema.fields if f.name == "value"), None)
    if field is None or not isinstance(field.dataType, (BinaryType, StringType)):
        raise OptionError("the sink needs a 'value' column of type binary or string")
    return paths[0]


def payloads(batches: Iterable[pa.RecordBatch]) -> Iterator[bytes]:
    """The ``value`` column of Arrow batches as bytes (strings as their UTF-8, which is what
    Arrow holds: viewed as binary, not encoded again)."""
    import pyarrow as pa

    for batch in batches:
        col = batch.column("value")
        if col.null_count:
            raise OptionError("the sink's value column holds a null; filter it out first")
        if pa.types.is_string(col.type):
            col = col.view(pa.binary())
        elif pa.types.is_large_string(col.type):
            col = col.view(pa.large_binary())
        yield from col.to_pylist()


def stage(queue_dir: str, values: Iterable[bytes]) -> StagedPart:
    """Executor side: write this task's payloads as a staged part (not yet visible to the queue)."""
    tmp = adoption.new_temp_path(queue_dir, adoption.STAGING)
    writer = adoption.BatchWriter(tmp, "part")
    try:
        for value in values:
            writer.add(value)
        writer.finish()
    except BaseException:
        writer.discard()
        raise
    final = tmp.replace(os.sep + ".", os.sep).removesuffix(".tmp") + ".part"
    os.rename(tmp, final)
    return StagedPart(final, writer.count)


def publish(queue_dir: str, messages: Sequence[WriterCommitMessage | None], key: str) -> bool:
    """Driver side: deliver every staged part as one spool batch named ``key`` (atomically);
    a key already adopted is not delivered again.  Returns whether it was published."""
    parts = [m for m in messages if isinstance(m, StagedPart)]
    if adoption.Ledger(adoption.spool_dir(queue_dir)).adopted(key) or _spooled(queue_dir, key):
        log.info("batch %r was published before; dropping its replay", key)
        discard(parts)
        return False
    tmp = adoption.new_temp_path(queue_dir)
    writer = adoption.BatchWriter(tmp, key)
    try:
        for part in parts:
            _, records = adoption.read_batch(part.path)
            for payload, expire_ms, _ in records:
                writer.add(payload, expire_ms)
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

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
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

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return stage(self.queue_dir, payloads(iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        publish(self.queue_dir, messages, f"{self.sink_id}:{batchId}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        discard(messages)
