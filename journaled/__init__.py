"""journaled: durable, fan-out, transactional queues on local disk.

Only re-exports; see the modules for the parts (docs/design.md explains the layers).
"""

import importlib as _importlib
import logging as _logging
import os as _os
from typing import TYPE_CHECKING, Any

# First thing: with JOURNALED_PURE_PYTHON=1 the mypyc-compiled modules load from their .py files
# (Python's import prefers the .so beside them), so both ways run the very same source.  Read here
# (the same test as journaled.hotpath.pure_requested) so a plain import loads no other module.
if _os.environ.get("JOURNALED_PURE_PYTHON", "") not in ("", "0"):
    from journaled import hotpath as _hotpath

    _hotpath.install_if_pure()

# Each public name is imported when first used (PEP 562), so a process that needs one part --
# a Spark worker importing journaled.spark, a tool reading one file format -- does not pay for
# the package's every module at start-up.  Type checkers see the plain imports below.
_EXPORTS = {
    "BlockingQueue": "journaled.wrappers",
    "BytesSerializer": "journaled.serializers",
    "ClientStats": "journaled.stats",
    "CorruptJournal": "journaled.errors",
    "DeadLetter": "journaled.deadletter",
    "Empty": "journaled.errors",
    "ForeignFile": "journaled.errors",
    "Full": "journaled.errors",
    "Health": "journaled.stats",
    "InvalidName": "journaled.errors",
    "Item": "journaled.item",
    "ItemTooLarge": "journaled.errors",
    "JournalIOError": "journaled.errors",
    "JournaledError": "journaled.errors",
    "JournaledQueue": "journaled.queue",
    "JsonSerializer": "journaled.serializers",
    "OwnerBusy": "journaled.errors",
    "OwnerLost": "journaled.errors",
    "PickleSerializer": "journaled.serializers",
    "PoisonItem": "journaled.stats",
    "Queue": "journaled.stdqueue",
    "QueueClosed": "journaled.errors",
    "QueueConfig": "journaled.config",
    "QueueDirectoryGone": "journaled.errors",
    "QueueForked": "journaled.errors",
    "QueueLocked": "journaled.errors",
    "QueueStats": "journaled.stats",
    "Reader": "journaled.reader",
    "ReaderConfig": "journaled.config",
    "ReaderStats": "journaled.stats",
    "RecoveryEvent": "journaled.log.journal",
    "SerializationError": "journaled.errors",
    "Serializer": "journaled.serializers",
    "Transaction": "journaled.wrappers",
    "TransactionalQueue": "journaled.wrappers",
    "UnknownRead": "journaled.errors",
    "UnknownReader": "journaled.errors",
    "UnsafeDirectory": "journaled.errors",
    "UnsupportedVersion": "journaled.errors",
    "inspect_queue": "journaled.inspection",
    "spool_put": "journaled.disk.spoolfiles",
}

if TYPE_CHECKING:
    from journaled.config import QueueConfig, ReaderConfig
    from journaled.deadletter import DeadLetter
    from journaled.disk.spoolfiles import spool_put
    from journaled.errors import (
        CorruptJournal,
        Empty,
        ForeignFile,
        Full,
        InvalidName,
        ItemTooLarge,
        JournaledError,
        JournalIOError,
        OwnerBusy,
        OwnerLost,
        QueueClosed,
        QueueDirectoryGone,
        QueueForked,
        QueueLocked,
        SerializationError,
        UnknownRead,
        UnknownReader,
        UnsafeDirectory,
        UnsupportedVersion,
    )
    from journaled.inspection import inspect_queue
    from journaled.item import Item
    from journaled.log.journal import RecoveryEvent
    from journaled.queue import JournaledQueue
    from journaled.reader import Reader
    from journaled.serializers import BytesSerializer, JsonSerializer, PickleSerializer, Serializer
    from journaled.stats import ClientStats, Health, PoisonItem, QueueStats, ReaderStats
    from journaled.stdqueue import Queue
    from journaled.wrappers import BlockingQueue, Transaction, TransactionalQueue


else:  # hidden from type checkers, which would otherwise take any attribute for a valid one

    def __getattr__(name: str) -> Any:
        module = _EXPORTS.get(name)
        if module is None:
            # `import journaled; journaled.txn.process` worked while this file imported everything
            try:
                return _importlib.import_module(f"journaled.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"journaled.{name}":
                    raise
                raise AttributeError(f"module 'journaled' has no attribute {name!r}") from None
        value = getattr(_importlib.import_module(module), name)
        globals()[name] = value  # the next access is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(_EXPORTS))


__version__ = "0.1.0"

# A library's convention: its log records go nowhere until the application configures logging.
_logging.getLogger("journaled").addHandler(_logging.NullHandler())

__all__ = [
    "BlockingQueue",
    "BytesSerializer",
    "ClientStats",
    "CorruptJournal",
    "DeadLetter",
    "Empty",
    "ForeignFile",
    "Full",
    "Health",
    "InvalidName",
    "Item",
    "ItemTooLarge",
    "JournalIOError",
    "JournaledError",
    "JournaledQueue",
    "JsonSerializer",
    "OwnerBusy",
    "OwnerLost",
    "PickleSerializer",
    "PoisonItem",
    "Queue",
    "QueueClosed",
    "QueueConfig",
    "QueueDirectoryGone",
    "QueueForked",
    "QueueLocked",
    "QueueStats",
    "Reader",
    "ReaderConfig",
    "ReaderStats",
    "RecoveryEvent",
    "SerializationError",
    "Serializer",
    "Transaction",
    "TransactionalQueue",
    "UnknownRead",
    "UnknownReader",
    "UnsafeDirectory",
    "UnsupportedVersion",
    "__version__",
    "inspect_queue",
    "spool_put",
]
