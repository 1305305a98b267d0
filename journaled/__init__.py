"""journaled: durable, fan-out, transactional queues on local disk.

Only re-exports; see the modules for the parts (docs/design.md explains the layers).
"""

import logging as _logging

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
