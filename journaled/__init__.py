"""journaled: durable, fan-out, transactional queues on local disk.

Only re-exports; see the modules for the parts (docs/design.md explains the layers).
"""

from journaled.config import QueueConfig, ReaderConfig
from journaled.errors import (
    CorruptJournal,
    Empty,
    Full,
    InvalidName,
    ItemTooLarge,
    JournaledError,
    JournalIOError,
    QueueClosed,
    QueueLocked,
    UnknownRead,
    UnknownReader,
    UnsupportedVersion,
)
from journaled.item import Item
from journaled.journal import RecoveryEvent
from journaled.queue import JournaledQueue
from journaled.reader import Reader, ReaderStats

__version__ = "0.1.0"

__all__ = [
    "CorruptJournal",
    "Empty",
    "Full",
    "InvalidName",
    "Item",
    "ItemTooLarge",
    "JournalIOError",
    "JournaledError",
    "JournaledQueue",
    "QueueClosed",
    "QueueConfig",
    "QueueLocked",
    "Reader",
    "ReaderConfig",
    "ReaderStats",
    "RecoveryEvent",
    "UnknownRead",
    "UnknownReader",
    "UnsupportedVersion",
    "__version__",
]
