"""PySpark integration: journaled queues as a Spark source and an exactly-once sink.

Needs the ``spark`` extra (``pip install 'journaled[spark]'``); the core package never imports
this.  Register with ``spark.dataSource.register(JournaledDataSource)``, then use the short
name ``"journaled"``.  docs/spark.md has the options and a complete pipeline.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from journaled.spark.offsets import DataLossError, OptionError, offsets_behind
from journaled.spark.sink import JournaledBatchWriter, JournaledStreamWriter
from journaled.spark.source import SCHEMA_DDL, JournaledBatchReader, JournaledStreamReader


class JournaledDataSource(DataSource):
    """The ``"journaled"`` data source (batch and streaming, read and write)."""

    @classmethod
    def name(cls) -> str:
        return "journaled"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return JournaledBatchReader(dict(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return JournaledStreamReader(dict(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return JournaledBatchWriter(dict(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return JournaledStreamWriter(dict(self.options), schema, overwrite)


__all__ = ["DataLossError", "JournaledDataSource", "OptionError", "offsets_behind"]
