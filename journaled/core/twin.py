"""Which reader core a queue builds: the reference, or the reference with its hot operations compiled.

``journaled/core/_coreops.c`` (built by ``pip install`` where a C compiler exists, like the format's
twins) holds ``CoreOps``, whose ``take``, ``commit`` and ``on_put`` do the common case of
:class:`~journaled.core.readercore.ReaderCore`'s methods of those names in C and hand every other
case, untouched, to the reference: :class:`CompiledReaderCore` derives from both, ``CoreOps``
first, so its three methods shadow the reference's and everything else is the reference's own.
Both leave a core in the same state after every call (tests/core/test_core_twin.py drives them
with the same random operations).

This module alone imports ``_coreops`` and decides once, at import, with the same switch as the
format's twins (``JOURNALED_PURE_PYTHON=1`` selects the reference); :func:`describe` says which and
why.  The C code reads and writes a core's attributes in its instance dict, so this module checks
that no class of the core defines an attribute of those names (a property would be bypassed).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from typing import Any, Final

from journaled.config import ReaderConfig
from journaled.core.readbehind import ITEM_OVERHEAD
from journaled.core.readercore import ReaderCore
from journaled.format.speedups import ENV_VAR
from journaled.item import Item

#: The ``ABI_VERSION`` of ``_coreops.c`` this code drives.  A build with another number is stale.
ABI_VERSION: Final = 2

#: The core's attributes the compiled methods read and write in its instance dict.
INSTANCE_FIELDS: Final = (
    "parked",
    "mem",
    "config",
    "load_id",
    "mem_bytes",
    "open",
    "delivered",
    "errors",
    "backlog_bytes",
    "head",
    "done",
    "head_moved",
    "dirty",
    "committed",
    "saw_expiry",
    "waiters",
)
#: The slots of Item and ReaderConfig they read (checked to be plain slots: no Python code runs).
ITEM_SLOTS: Final = ("id", "data", "expire_at", "error_count")
CONFIG_SLOTS: Final = ("max_memory", "max_age", "max_errors", "open_read_timeout")


def _plain_slots(cls: type, names: tuple[str, ...]) -> bool:
    return all(type(cls.__dict__.get(n)).__name__ == "member_descriptor" for n in names)


def _build() -> tuple[type[ReaderCore] | None, str]:
    if os.environ.get(ENV_VAR, "") not in ("", "0"):
        return None, f"pure Python ({ENV_VAR}={os.environ[ENV_VAR]})"
    try:
        from journaled.core import _coreops  # type: ignore[attr-defined]
    except ImportError:
        return None, "pure Python (the compiled reader core is not built)"
    abi = getattr(_coreops, "ABI_VERSION", None)
    if abi != ABI_VERSION:
        return None, f"pure Python (the compiled reader core has ABI {abi}, not {ABI_VERSION}: rebuild it)"
    if any(hasattr(ReaderCore, name) for name in INSTANCE_FIELDS):
        return None, "pure Python (a class attribute shadows a field the compiled core writes)"
    if not (_plain_slots(Item, ITEM_SLOTS) and _plain_slots(ReaderConfig, CONFIG_SLOTS)):
        return None, "pure Python (Item or ReaderConfig fields are not plain slots)"
    _coreops.configure(
        take=ReaderCore.take,
        commit=ReaderCore.commit,
        on_put=ReaderCore.on_put,
        item_type=Item,
        config_type=ReaderConfig,
        deque_type=deque,
        overhead=ITEM_OVERHEAD,
    )

    class CompiledReaderCore(_coreops.CoreOps, ReaderCore):  # type: ignore[misc]
        """:class:`ReaderCore` with ``take``, ``commit`` and ``on_put`` compiled (the module
        docstring); same construction, same state, same results."""

    CompiledReaderCore.__module__ = __name__
    CompiledReaderCore.__qualname__ = "CompiledReaderCore"
    return CompiledReaderCore, "compiled (C extension)"


_built = _build()


def reader_ops(get: Callable[..., Any], commit: Callable[..., Any]) -> type | None:
    """The compiled base of ``journaled.reader.CompiledReader`` (``_coreops.ReaderOps``: ``get`` and
    ``commit``'s common case in C, the rest to ``get``/``commit``, the ``Reader`` methods given), or
    None when the reference runs alone.  Only the package's reader module calls it, once."""
    if _built[0] is None:
        return None
    from journaled.core import _coreops  # type: ignore[attr-defined]

    _coreops.configure_reader(get=get, commit=commit)
    base: type = _coreops.ReaderOps
    return base


#: :class:`ReaderCore` with its hot operations compiled, or None when the reference runs alone.
CompiledReaderCore: Final = _built[0]
_description: Final = _built[1]


def core_class() -> type[ReaderCore]:
    """The reader core class a queue builds in this process."""
    return ReaderCore if CompiledReaderCore is None else CompiledReaderCore


def describe() -> str:
    """One line for humans: ``compiled (C extension)`` or ``pure Python (...)`` with the reason."""
    return _description


__all__ = ["ABI_VERSION", "CompiledReaderCore", "core_class", "describe", "reader_ops"]
