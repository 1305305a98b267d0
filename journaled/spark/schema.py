"""The Spark source's columns and its schema for a read's options, importing nothing heavy.

Spark asks a Python worker of its own for a source's schema when a query names none, and that
worker imports only this module (and journaled.errors): the offsets, planning and reading
modules, and the journal readers under them, cost it ~0.1 s more, every default read.
journaled.spark.offsets re-exports every name here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from journaled.errors import JournaledError

__all__ = [
    "ALL_COLUMNS_DDL",
    "COLUMN_TYPES",
    "DEFAULT_COLUMNS",
    "HEADERS_DDL",
    "NULLABLE_COLUMNS",
    "QUEUE_DDL",
    "SCHEMA_DDL",
    "OptionError",
    "opt",
    "opt_bool",
    "queue_paths",
    "schema_ddl",
]

#: Every column the source can fill, with its type as Spark writes it (``DataType.simpleString``);
#: ``key``, ``not_before``, ``expire_at`` and ``headers`` are null for an item without one.
COLUMN_TYPES = {
    "id": "bigint",
    "value": "binary",
    "timestamp": "timestamp",
    "expire_at": "timestamp",
    "queue": "string",
    "key": "binary",
    "not_before": "timestamp",
    "headers": "array<struct<key:string,value:binary>>",
}
#: The columns that are null for an item without one (a schema may not declare them NOT NULL).
NULLABLE_COLUMNS = frozenset({"expire_at", "key", "not_before", "headers"})


def _ddl(name: str) -> str:
    """Column ``name`` in Spark's DDL, ``NOT NULL`` when every item has it: Spark then copies it
    from the Arrow batch without a null check per row (issue 37: the default read 0.92x -> 1.03x
    the text source's CPU at 2M rows)."""
    return f"{name} {COLUMN_TYPES[name]}" + ("" if name in NULLABLE_COLUMNS else " NOT NULL")


#: The columns of a read that names no schema: Kafka's offset, value, timestamp and key.  Spark
#: prunes no column of a Python source and every column crosses from the Python worker to the JVM
#: row by row, so the default is what most queries use and the rest is named (``queue``, a
#: string as long as the queue's path, cost a default read of one queue 15 % of its time, for a
#: value it already knows).
DEFAULT_COLUMNS = ("id", "value", "timestamp", "key")
#: The default schema, in Spark's DDL.
SCHEMA_DDL = ", ".join(_ddl(name) for name in DEFAULT_COLUMNS)
#: Every column but ``headers`` (the default schema until this release): ``.schema(ALL_COLUMNS_DDL)``.
ALL_COLUMNS_DDL = ", ".join(_ddl(name) for name in COLUMN_TYPES if name != "headers")
#: The column a read of several queues adds by default, to tell their rows apart.
QUEUE_DDL = _ddl("queue")
#: The column option ``includeHeaders`` adds, as Kafka's source has it (null: no headers).
HEADERS_DDL = _ddl("headers")


class OptionError(JournaledError, ValueError):
    """A source or sink option is missing or malformed."""


def opt(options: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    """Option ``name``, case-insensitively (Spark's own option maps are)."""
    low = name.lower()
    for k, v in options.items():
        if k.lower() == low:
            return v
    return default


def opt_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    """Option ``name`` as a boolean (``true``/``1``/``yes``, ``false``/``0``/``no``), else
    ``default``; anything else is an :class:`OptionError`."""
    v = opt(options, name)
    if v is None:
        return default
    if v.strip().lower() in ("true", "1", "yes"):
        return True
    if v.strip().lower() in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name} must be true or false, not {v!r}")


def queue_paths(options: Mapping[str, str]) -> dict[str, str]:
    """``{key: directory}`` from ``path`` and/or ``paths`` (comma-separated), sorted by key."""
    raw: list[str] = []
    for name in ("path", "paths"):
        v = opt(options, name)
        if v:
            raw.extend(p.strip() for p in v.split(",") if p.strip())
    if not raw:
        raise OptionError("give a queue directory: .load(path) or option('paths', 'a,b,c')")
    return {os.path.normpath(p): os.path.abspath(p) for p in sorted(set(raw))}


def schema_ddl(options: Mapping[str, str]) -> str:
    """The source's schema for ``options``: :data:`SCHEMA_DDL`, plus ``queue`` when the read names
    several queues, plus ``headers`` when ``includeHeaders`` is true."""
    ddl = SCHEMA_DDL
    try:
        several = len(queue_paths(options)) > 1
    except OptionError:
        several = False  # no path: the reader says so
    if several:
        ddl += f", {QUEUE_DDL}"
    if opt_bool(options, "includeHeaders", False):
        ddl += f", {HEADERS_DDL}"
    return ddl
