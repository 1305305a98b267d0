"""Lets Spark find the ``"journaled"`` data source with no ``spark.dataSource.register`` call.

PySpark (>= 4.0) imports every top-level module named ``pyspark_*`` on the Python workers' path
when a session first looks up a Python data source, and registers its ``DefaultSource``.  This
module is installed next to the ``journaled`` package; it is only ever imported by PySpark.
"""

from journaled.spark import JournaledDataSource as DefaultSource

__all__ = ["DefaultSource"]
