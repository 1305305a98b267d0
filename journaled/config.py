"""Configuration as frozen, validated data.

Configs describe *what* a queue or reader should do; they hold no behaviour.  Every bad value is
rejected when the object is built, with a message naming the field, so a typo never turns into
surprising behaviour hours later.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
from typing import Literal, Union

import attrs

from journaled.errors import InvalidName

KiB = 1024
MiB = 1024 * KiB

#: The largest journal file we allow: record CRC seeds are 32-bit offsets (see docs/format.md).
MAX_JOURNAL_SIZE = 2**31
MAX_ITEM_SIZE = 2**30

SyncPolicy = Union[Literal["always", "never"], float]
Start = Union[Literal["earliest", "latest"], int, float, _dt.datetime]


def _check_sync(_inst: object, attribute: attrs.Attribute[object], value: object) -> None:
    if value in ("always", "never"):
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(
            f"{attribute.name} must be 'always', 'never' or a number of seconds, got {value!r}"
        )
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{attribute.name} must be a positive number of seconds, got {value!r}")


def _positive(_inst: object, attribute: attrs.Attribute[object], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{attribute.name} must be a positive number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{attribute.name} must be finite, got {value!r}")


def _optional_positive(inst: object, attribute: attrs.Attribute[object], value: object) -> None:
    if value is not None:
        _positive(inst, attribute, value)


def _at_most(limit: int) -> object:
    def check(_inst: object, attribute: attrs.Attribute[object], value: int) -> None:
        if value > limit:
            raise ValueError(f"{attribute.name} must be at most {limit}, got {value!r}")

    return check


@attrs.frozen(kw_only=True)
class QueueConfig:
    """Settings of one queue directory.

    Attributes:
        sync: when a put is durable (see docs/design.md, "Durability").  ``"always"``: ``put``
            returns after the record is on stable storage (group commit shares one fdatasync
            among concurrent puts).  A number of seconds (default ``0.05``): puts are buffered
            and a background flusher writes and fdatasyncs at least that often; ``q.sync()``
            forces it.  ``"never"``: each put is handed to the OS before ``put`` returns (it
            survives a process crash) but is never fsynced by us.
        journal_size: rotate to a new journal file when the next record would pass this size
            (default 16 MiB).
        max_item_size: largest payload accepted (default 16 MiB); larger puts raise
            ``ItemTooLarge`` and write nothing.
        checkpoint_interval: seconds between reader checkpoints when something changed
            (default 1.0); checkpoints are also written on close.
        archive_dir: if set, journal files every reader has passed are moved here instead of
            being deleted.  A relative path is taken relative to the queue directory.
        file_mode: permission bits of files the queue creates (default ``0o600``).
    """

    sync: SyncPolicy = attrs.field(default=0.05, validator=_check_sync)
    journal_size: int = attrs.field(
        default=16 * MiB, validator=[attrs.validators.instance_of(int), _positive, _at_most(MAX_JOURNAL_SIZE)]  # type: ignore[list-item]
    )
    max_item_size: int = attrs.field(
        default=16 * MiB, validator=[attrs.validators.instance_of(int), _positive, _at_most(MAX_ITEM_SIZE)]  # type: ignore[list-item]
    )
    checkpoint_interval: float = attrs.field(default=1.0, validator=_positive)
    archive_dir: str | None = attrs.field(
        default=None,
        converter=attrs.converters.optional(os.fspath),  # type: ignore[misc]
    )
    file_mode: int = attrs.field(default=0o600, validator=attrs.validators.instance_of(int))

    @property
    def sync_interval(self) -> float | None:
        """The periodic flush interval in seconds, or None for ``always``/``never``."""
        return None if isinstance(self.sync, str) else float(self.sync)


def _check_start(_inst: object, attribute: attrs.Attribute[object], value: object) -> None:
    if value in ("earliest", "latest"):
        return
    if isinstance(value, _dt.datetime):
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(
            f"{attribute.name} must be 'earliest', 'latest', an item id (int), epoch seconds "
            f"(float) or a datetime, got {value!r}"
        )
    if isinstance(value, int) and value < 0:
        raise ValueError(f"{attribute.name}: item ids are non-negative, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{attribute.name}: time must be finite, got {value!r}")


@attrs.frozen(kw_only=True)
class ReaderConfig:
    """Settings of one named reader.

    Attributes:
        start: where a *new* reader begins (ignored when the reader already exists):
            ``"earliest"`` (default: the oldest item still in the journal, so nothing is lost),
            ``"latest"`` (only items put from now on), an ``int`` item id, or a point in time
            (``float`` epoch seconds or a ``datetime``): the first item added at or after it.
        max_memory: most payload bytes kept in this reader's in-memory queue (default 16 MiB).
            Items beyond it stay on disk and are read back in order as the memory part drains.
    """

    start: Start = attrs.field(default="earliest", validator=_check_start)
    max_memory: int = attrs.field(
        default=16 * MiB, validator=[attrs.validators.instance_of(int), _positive]  # type: ignore[list-item]
    )


_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-")


def validate_name(name: object, what: str = "name") -> str:
    """Return ``name`` if it is a safe queue/reader name, else raise :class:`InvalidName`.

    Allowed: 1-128 characters from ``[A-Za-z0-9_.:-]``, not starting with a dot.  This alone
    guarantees a name can never form a path outside the queue directory (no separators, no
    ``..``, no hidden files) and never collides with the queue's own temporary files, which all
    start with a dot.
    """
    if not isinstance(name, str):
        raise InvalidName(f"{what} must be a str, got {type(name).__name__}")
    if not 1 <= len(name) <= 128:
        raise InvalidName(f"{what} must be 1-128 characters, got {len(name)}")
    if name.startswith("."):
        raise InvalidName(f"{what} must not start with a dot: {name!r}")
    bad = set(name) - _NAME_CHARS
    if bad:
        raise InvalidName(f"{what} {name!r} has characters outside [A-Za-z0-9_.:-]: {sorted(bad)!r}")
    return name
