"""The plain single put in one C call: ``owner/_putops.c``'s ``PlainPut``, where it is built.

``JournaledQueue.put(data)`` with bytes and no option is the hottest call of all.  Its reference is
``queue.put`` -> :meth:`PutPath.append_locked <journaled.owner.putpath.PutPath.append_locked>` ->
``Writer.append_one``, then every reader core's ``on_put``.  :func:`plain_put` builds, once per open
queue, a ``PlainPut`` bound to that queue's lock, put path, journal state and writer: called with
the payload, it does that whole path's common case in C and returns the id; anything else (a
reader with ``max_items``/``max_size``, a record that needs the next file, a closed or poisoned
journal, an unexpected type anywhere) it declines, returning None with nothing changed, and
``queue.put`` runs the reference.  The record is still encoded by :data:`speedups.encode_puts
<journaled.format.speedups.encode_puts>`, the item built by ``journaled.item.new_item`` and each
reader told by its core's own ``on_put``; tests/owner/test_put_twin.py compares both paths.

This module alone imports ``_putops``, under the same switch as the other twins
(``JOURNALED_PURE_PYTHON=1``).  The C code reads and writes instance attributes of the put path,
the writer and the journal state in their instance dicts, and plain slots of ``JournalFile``,
``FileHeader`` and ``ReaderConfig``: this module checks that no class attribute (a property)
stands in the way, else the reference runs alone.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Final

from journaled.config import QueueConfig, ReaderConfig
from journaled.format import speedups
from journaled.format.record import PUT_OVERHEAD, FileHeader
from journaled.item import new_item
from journaled.log.journal import Journal
from journaled.log.state import INDEX_EVERY, JournalFile, LogState
from journaled.log.writer import WRITE_OUT_AT, Writer
from journaled.owner.putpath import PutPath

#: The ``ABI_VERSION`` of ``_putops.c`` this code drives.  A build with another number is stale.
ABI_VERSION: Final = 1

#: Instance attributes the C code reads or writes, by class: none may be a class attribute.
_INSTANCE: Final = {
    PutPath: ("closed", "cores", "put_count", "put_bytes"),
    Writer: ("buf", "appended", "write_through", "limit"),
    LogState: ("lock", "files", "poisoned", "closed", "next_id", "last_add_ms"),
}
#: Slots it reads (plain slots run no Python code).
_SLOTS: Final = {
    JournalFile: ("size", "header", "index_ids", "index_offsets"),
    FileHeader: ("salt",),
    ReaderConfig: ("max_items", "max_size"),
}


def _load() -> tuple[object | None, str]:
    if os.environ.get(speedups.ENV_VAR, "") not in ("", "0"):
        return None, f"pure Python ({speedups.ENV_VAR}={os.environ[speedups.ENV_VAR]})"
    if speedups.native is None:
        return None, "pure Python (the format's twins are not compiled)"
    try:
        from journaled.owner import _putops  # type: ignore[attr-defined]
    except ImportError:
        return None, "pure Python (the compiled put is not built)"
    abi = getattr(_putops, "ABI_VERSION", None)
    if abi != ABI_VERSION:
        return None, f"pure Python (the compiled put has ABI {abi}, not {ABI_VERSION}: rebuild it)"
    for cls, names in _INSTANCE.items():
        if any(hasattr(cls, n) for n in names):
            return None, f"pure Python ({cls.__name__} has a class attribute the compiled put writes)"
    for cls, names in _SLOTS.items():
        if any(type(cls.__dict__.get(n)).__name__ != "member_descriptor" for n in names):
            return None, f"pure Python ({cls.__name__}'s fields are not plain slots)"
    return _putops, "compiled (C extension)"


_module, _description = _load()


def plain_put(
    lock: threading.Lock, putpath: PutPath, journal: Journal, config: QueueConfig
) -> Callable[[object], int | None] | None:
    """A ``PlainPut`` for this open queue, or None when the reference runs alone (the module
    docstring).  Call it with the queue lock *not* held: it takes ``lock`` itself."""
    if _module is None:
        return None
    state, writer = journal.appending_parts()
    fast: Callable[[object], int | None] = _module.PlainPut(  # type: ignore[attr-defined]
        lock=lock,
        putpath=putpath,
        writer=writer,
        state=state,
        encode_puts=speedups.encode_puts,
        new_item=new_item,
        wait_durable=journal.wait_durable if config.sync == "always" else None,
        config_type=ReaderConfig,
        max_item_size=config.max_item_size,
        put_overhead=PUT_OVERHEAD,
        index_every=INDEX_EVERY,
        write_out_at=WRITE_OUT_AT,
        time_module=time,
    )
    return fast


def describe() -> str:
    """One line for humans: ``compiled (C extension)`` or ``pure Python (...)`` with the reason."""
    return _description


__all__ = ["ABI_VERSION", "describe", "plain_put"]
