"""PySpark integration: journaled queues as a Spark source and an exactly-once sink.

Needs the ``spark`` extra (``pip install 'journaled[spark]'``); the core package never imports
this.  Register with ``spark.dataSource.register(JournaledDataSource)``, then use the short
name ``"journaled"``.  docs/spark.md has the options and a complete pipeline.

Spark starts Python workers to look the source up, to plan a query, to drive a stream reader and
to write, and each one imports this package afresh; so the reader and the writer modules (and
pyarrow) are imported only by the worker that needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource

if TYPE_CHECKING:
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )
    from pyspark.sql.types import StructType

    from journaled.spark.offsets import DataLossError, OptionError, offsets_behind


class JournaledDataSource(DataSource):
    """The ``"journaled"`` data source (batch and streaming, read and write)."""

    @classmethod
    def name(cls) -> str:
        return "journaled"

    def schema(self) -> str:
        from journaled.spark.schema import schema_ddl  # light: this worker reads nothing

        return schema_ddl(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        from journaled.spark.offsets import opt_bool
        from journaled.spark.source import JournaledBatchReader, JournaledPushdownReader

        options = dict(self.options)
        if opt_bool(options, "filterPushdown", False):
            return JournaledPushdownReader(options, schema)
        return JournaledBatchReader(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from journaled.spark.source import JournaledStreamReader

        return JournaledStreamReader(dict(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from journaled.spark.sink import JournaledBatchWriter

        return JournaledBatchWriter(dict(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from journaled.spark.sink import JournaledStreamWriter

        return JournaledStreamWriter(dict(self.options), schema, overwrite)


_FROM_OFFSETS = ("DataLossError", "OptionError", "offsets_behind")


def __getattr__(name: str) -> object:
    # The errors and offsets_behind live in the pyspark-free offsets module, loaded on first use.
    if name in _FROM_OFFSETS:
        from journaled.spark import offsets

        return getattr(offsets, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DataLossError", "JournaledDataSource", "OptionError", "offsets_behind"]
