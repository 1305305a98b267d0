"""Configuration as frozen, validated data.

Configs describe *what* a queue or reader should do; they hold no behaviour.  Every bad value is
rejected when the object is built, with a message naming the field, so a typo never turns into
surprising behaviour hours later.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
from collections.abc import Callable
from typing import Any, Literal, Protocol, Union

import attrs

from journaled.errors import InvalidName
from journaled.format.record import MAX_PAYLOAD
from journaled.item import Item

KiB = 1024
MiB = 1024 * KiB

#: The largest journal file we allow: record CRC seeds are 32-bit offsets (see docs/format.md).
MAX_JOURNAL_SIZE = 2**31
MAX_ITEM_SIZE = MAX_PAYLOAD

SyncPolicy = Union[Literal["always", "never"], float]
RecoveryMode = Literal["salvage", "point_in_time", "tolerate_tail", "strict"]
RECOVERY_MODES: tuple[str, ...] = ("salvage", "point_in_time", "tolerate_tail", "strict")
Start = Union[Literal["earliest", "latest"], int, float, _dt.datetime]


def _check_sync(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value in ("always", "never"):
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{attribute.name} must be 'always', 'never' or a number of seconds, got {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{attribute.name} must be a positive number of seconds, got {value!r}")


def _positive(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{attribute.name} must be a positive number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{attribute.name} must be finite, got {value!r}")


def _check_mode(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    # permission bits only: setuid/setgid/sticky make no sense for journal files
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0o777:
        raise ValueError(f"{attribute.name} must be permission bits 0o000..0o777, got {value!r}")


def _check_archive_dir(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    # archiving "into" the queue directory would rename each file onto itself (or, for "",
    # silently delete it): never what was meant
    if value is not None and os.path.normpath(value) == ".":
        raise ValueError(f"{attribute.name} must not be the queue directory itself, got {value!r}")


def _optional_positive(inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None:
        _positive(inst, attribute, value)


def _optional_positive_int(inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{attribute.name} must be an int or None, got {value!r}")
        _positive(inst, attribute, value)


#: ``retention_age`` / ``retention_bytes`` / ``dedup_window`` value that removes a stored
#: setting (Kafka's ``-1``).
NO_LIMIT = -1
#: The queue-level settings stored with the queue (docs/format.md [F-36]).
QUEUE_SETTINGS = ("retention_age", "retention_bytes", "dedup_window", "compression")
#: ``QueueConfig.compression`` values: a codec stores it, ``"none"`` removes a stored one.
COMPRESSIONS = ("zstd", "none")


def _check_compression(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    # one sentence naming the choices: attrs' in_() message is a tuple holding its Attribute
    if value is not None and (type(value) is not str or value not in COMPRESSIONS):
        raise ValueError(f"{attribute.name} must be 'zstd', 'none' or None, got {value!r}")


def _check_bool(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    # one sentence: attrs' instance_of() message is a tuple holding its Attribute
    if type(value) is not bool:
        raise TypeError(f"{attribute.name} must be True or False, got {value!r}")


def _check_retention(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None or (type(value) is int and value == NO_LIMIT):
        return
    ints_only = attribute.name == "retention_bytes"
    if isinstance(value, bool) or not isinstance(value, int if ints_only else (int, float)):
        kind = "an int" if ints_only else "a number of seconds"
        raise TypeError(f"{attribute.name} must be {kind}, -1 (no limit) or None, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{attribute.name} must be positive, -1 (no limit) or None, got {value!r}")


def retention_settings(config: QueueConfig, stored: dict[str, Any]) -> dict[str, Any]:
    """The queue-level settings line (docs/format.md, section 15) after opening with ``config``
    over ``stored``: ``None`` keeps the stored limit, ``-1`` removes it, a value replaces it
    (``compression``: ``"none"`` removes it).  Keys without a limit are absent (an empty dict:
    no line)."""
    out = dict(stored)
    for key in QUEUE_SETTINGS:
        value = getattr(config, key)
        if value == NO_LIMIT or value == "none":
            out.pop(key, None)
        elif value is not None:
            out[key] = value
    return out


def retention_limits(stored: dict[str, Any]) -> tuple[float | None, int | None]:
    """``(retention_age, retention_bytes)`` from a stored queue-level line, validated: raises
    ``ValueError`` (or ``TypeError``) for a key it does not know or a value ``QueueConfig``
    refuses, so a damaged line is never half applied."""
    cfg = _stored_config(stored)
    return cfg.retention_age, cfg.retention_bytes


def stored_dedup_window(stored: dict[str, Any]) -> float | None:
    """The de-duplication window a stored queue-level line holds (None: off), validated as
    :func:`retention_limits` is."""
    return _stored_config(stored).dedup_window


def stored_compression(stored: dict[str, Any]) -> str | None:
    """The codec new writes use per a stored queue-level line (``None``: none), validated as
    :func:`retention_limits` is."""
    return _stored_config(stored).compression


def _stored_config(stored: dict[str, Any]) -> QueueConfig:
    unknown = set(stored) - set(QUEUE_SETTINGS)
    if unknown:
        raise ValueError(f"unknown queue settings {sorted(unknown)}")
    cfg = QueueConfig(
        retention_age=stored.get("retention_age"),
        retention_bytes=stored.get("retention_bytes"),
        dedup_window=stored.get("dedup_window"),
        compression=stored.get("compression"),
    )
    if NO_LIMIT in (cfg.retention_age, cfg.retention_bytes, cfg.dedup_window) or cfg.compression == "none":
        raise ValueError("a stored limit is never -1, a stored compression never 'none'")
    return cfg


class PutTarget(Protocol):
    """Anything with ``put(bytes)``: a ``JournaledQueue`` is one."""

    def put(self, data: bytes, /) -> object: ...


#: Where expired or dead-lettered items go: a callable taking the Item, or a queue to put into.
Sink = Union[Callable[[Item], object], PutTarget]


def _check_sink(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None or callable(value) or callable(getattr(value, "put", None)):
        return
    raise ValueError(
        f"{attribute.name} must be a callable taking an Item or an object with put(bytes), got {value!r}"
    )


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
            being deleted.  A relative path is taken relative to the queue directory.  Created
            (``0o700``) if missing.  It may be on another file system: files are then copied,
            fsynced, and only then removed from the queue directory.  It must not be the queue
            directory itself (``""``, ``"."`` or any path resolving to it raise ``ValueError``).
        file_mode: permission bits of files the queue creates (default ``0o600``).
        allow_shared_dir: open a queue directory that other users can write to (group- or
            world-writable mode bits, sticky ``/tmp``-like directories included) or that
            another user owns (default False: such a directory raises ``UnsafeDirectory``).
            Whoever can write the directory can plant files the queue reads, including spool
            batches that ``journaled.Queue`` unpickles: set it only when every such user is
            trusted.  Links planted inside the directory are refused either way.
        recovery: what opening does with damaged journal bytes (see docs/design.md, "Crash
            safety and recovery").  ``"salvage"`` (default): exactly the damaged records are
            skipped and every intact record is kept; a torn tail of the newest file is cut; a
            damaged file header is rebuilt from the records; each loss is reported with its ids.
            ``"point_in_time"``: each file ends at its first damaged record; the bytes cut off
            are kept in a ``*.damaged`` file and reported.  ``"tolerate_tail"``: only a torn
            tail of the newest file is cut; any other damage raises ``CorruptJournal``.
            ``"strict"``: any damage raises ``CorruptJournal``.
        retention_age: seconds; journal files whose records are all older than this are
            archived even when a reader or an external bookmark has not passed them (Kafka's
            ``retention.ms``).  A file's age is that of its newest record, bounded by when the
            next file was started; the file being written is never archived.  A reader behind
            loses those items: it goes on at the first item kept, the gap is logged (a warning
            with the ids) and counted in ``ReaderStats.items_lost_to_retention``.
        retention_bytes: archive the oldest journal files while the journal files together
            hold more than this many bytes (Kafka's ``retention.bytes``), with the same
            consequences; the file being written is never archived, so the journal may hold
            up to about ``journal_size`` more (plus what is written between two passes).
            Both limits are stored with the queue (``<queue>.settings``) so every later owner
            applies them: ``None`` (default) keeps what is stored (no limit if nothing is), a
            value stores it (an explicit change, logged), ``-1`` removes a stored limit.
        dedup_window: seconds.  A put whose ``key`` was put within this many seconds (by the
            first put's add time) returns the first put's id and stores nothing (``put_many``:
            item by item; ``dedup=False`` on the put stores regardless).  Stored with the queue
            like the retention limits, so every later owner (a client taking the queue over
            too) applies it: ``None`` (default) keeps what is stored (off if nothing is), a
            value stores it, ``-1`` removes it.  The window is rebuilt at open from the
            journal's keyed records of the last ``dedup_window`` seconds.  Costs: memory
            for each key put within the window (about 140 bytes per 16-byte key, keys older than
            the window are dropped), and opening reads that part of the journal back.
        compression: ``"zstd"``: new ``put_many`` batches are written as compressed units
            (docs/format.md section 4.5; single puts stay plain, docs/design.md "Compressed
            journals"), which every reader decodes, records old and new side by side.  Stored with
            the queue like the retention limits: ``None`` (default) keeps what is stored (none if
            nothing is), ``"zstd"`` stores it, ``"none"`` removes it; either applies to new writes
            only.  Needs a zstd binding (``pip install 'journaled[zstd]'``; built into Python 3.14):
            without one, opening such a queue raises ``CompressionUnavailable``.
    """

    sync: SyncPolicy = attrs.field(default=0.05, validator=_check_sync)
    journal_size: int = attrs.field(
        default=16 * MiB,
        validator=[attrs.validators.instance_of(int), _positive, _at_most(MAX_JOURNAL_SIZE)],  # type: ignore[list-item]
    )
    max_item_size: int = attrs.field(
        default=16 * MiB,
        validator=[attrs.validators.instance_of(int), _positive, _at_most(MAX_ITEM_SIZE)],  # type: ignore[list-item]
    )
    checkpoint_interval: float = attrs.field(default=1.0, validator=_positive)
    archive_dir: str | None = attrs.field(
        default=None,
        converter=attrs.converters.optional(os.fspath),
        validator=_check_archive_dir,
    )
    file_mode: int = attrs.field(default=0o600, validator=_check_mode)
    allow_shared_dir: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    recovery: RecoveryMode = attrs.field(default="salvage", validator=attrs.validators.in_(RECOVERY_MODES))
    retention_age: float | None = attrs.field(default=None, validator=_check_retention)
    retention_bytes: int | None = attrs.field(default=None, validator=_check_retention)
    dedup_window: float | None = attrs.field(default=None, validator=_check_retention)
    compression: str | None = attrs.field(default=None, validator=_check_compression)

    @property
    def sync_interval(self) -> float | None:
        """The periodic flush interval in seconds, or None for ``always``/``never``."""
        return None if isinstance(self.sync, str) else float(self.sync)


def _check_start(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
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

    Every field but ``start`` is stored with the queue (docs/design.md, "Durable settings"):
    every later owner, a reopen or a client taking the directory over, applies it, and
    ``q.reader(name)`` without a config uses it.  A callable sink cannot be stored: a later owner
    without it keeps the items that would go to it.  A client process cannot pass a sink at all:
    set one where the queue is owned, or with ``journaled config PATH reader NAME --dead-letter``.

    Attributes:
        start: where a *new* reader begins (ignored when the reader already exists):
            ``"earliest"`` (default: the oldest item still in the journal, so nothing is lost),
            ``"latest"`` (only items put from now on), an ``int`` item id, or a point in time
            (``float`` epoch seconds or a ``datetime``): the first item added at or after it.
        max_memory: most bytes kept in this reader's in-memory queue (default 16 MiB), each
            item counted as its payload plus a fixed 200 bytes for the objects that hold it
            (``journaled.core.readercore.ITEM_OVERHEAD``), so many tiny items are bounded too.  Items
            beyond it stay on disk and are read back in order as the memory part drains.
        max_items: most items in this reader's backlog (waiting plus open reads; default None,
            unbounded).  A ``put`` that would pass it raises :class:`~journaled.Full` and writes
            nothing, unless ``discard_old_when_full``.
        max_size: most payload bytes in this reader's backlog (default None, unbounded); same rule.
        discard_old_when_full: instead of refusing a put, drop this reader's oldest *waiting*
            items (never open reads) to make room; they are counted as ``discarded`` and go to no
            sink (default False).
        max_age: items added longer ago than this many seconds are expired for this reader
            (default None).  Per-item ``expire_at``/``ttl`` (given to ``put``) applies too.
            Expired items are never delivered.
        expire_to: where expired items go (default None: they are dropped, counted as
            ``expired``).  A *sink*: a callable, called with a :class:`~journaled.DeadLetter`
            (the :class:`~journaled.Item` with ``kind``, ``reason`` and ``reader`` added), or an
            object with ``put(bytes)`` such as another ``JournaledQueue``, which receives
            ``DeadLetter.encode()``'s envelope (a small header, then the payload untouched; read
            it back with ``DeadLetter.decode(item.data)``), not the bare payload.
            Sinks run on the queue's background thread, never under its lock, before the item is
            committed: at-least-once (a crash in between calls the sink again after reopen).
        open_read_timeout: seconds after which an open read is aborted automatically, as if
            its consumer had died (default None: never).  It counts as an error.
        max_errors: an item aborted this many times is not returned to the head but moved to
            ``dead_letter`` (or dropped if that is None), counted as ``dead_lettered``
            (default None: retried forever).  Error counts survive a clean close.
            ``reader.reject`` does not count towards it.
        dead_letter: a sink, like ``expire_to`` (a queue receives the same envelope), for items
            that reached ``max_errors`` and for items passed to ``reader.reject`` (without one,
            rejected items are dropped, counted as ``rejected``).
        retry_delay: seconds an aborted item waits before it is delivered again, doubled on
            each further abort: ``retry_delay * 2 ** (error_count - 1)`` (default None: at
            once for the first three aborts, then a built-in floor of 0.05 s doubling to 1 s,
            so a poison item cannot spin: core/retry.py).  A waiting item does not hold back the
            items behind it.  The delay is kept in memory only: after a crash or reopen the item
            is delivered at once.
        retry_delay_max: the longest such delay (default None: no cap).
        key_order: order per key among this reader's competing consumers (default False).
            For items put with a ``key``: at most one item of a key is open at a time on this
            reader, across every thread and process, and the items of a key are delivered in id
            order; an item whose key is busy never holds back items of other keys or items
            without a key.  An abort (with or without a delay) keeps the key's later items
            behind the retried one, and an item not due yet (``delay``/``not_before``) holds back
            the later items of its key until it is due; a commit, a reject, a dead letter or an
            expiry releases the key.  ``get_many`` returns at most one item per key.  Items
            waiting behind a busy key count against ``max_memory`` (docs/design.md, "Key order").
    """

    start: Start = attrs.field(default="earliest", validator=_check_start)
    max_memory: int = attrs.field(default=16 * MiB, validator=[attrs.validators.instance_of(int), _positive])
    # Policies (docs/design.md, "Reader policies").  Every field but ``start`` is stored in the
    # queue directory (docs/design.md, "Durable settings"): every later owner applies it.  The
    # *state* the policies act on (head, committed ids, error counts, add/expiry times) is on
    # disk as well and survives reopen.
    max_items: int | None = attrs.field(default=None, validator=_optional_positive_int)
    max_size: int | None = attrs.field(default=None, validator=_optional_positive_int)
    discard_old_when_full: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    max_age: float | None = attrs.field(default=None, validator=_optional_positive)
    expire_to: Sink | None = attrs.field(default=None, validator=_check_sink)
    open_read_timeout: float | None = attrs.field(default=None, validator=_optional_positive)
    max_errors: int | None = attrs.field(default=None, validator=_optional_positive_int)
    dead_letter: Sink | None = attrs.field(default=None, validator=_check_sink)
    retry_delay: float | None = attrs.field(default=None, validator=_optional_positive)
    retry_delay_max: float | None = attrs.field(default=None, validator=_optional_positive)
    key_order: bool = attrs.field(default=False, validator=_check_bool)


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


# ---------------------------------------------------------------------------------------------
# Durable settings: ReaderConfig <-> a JSON object (docs/design.md, "Durable settings")
# ---------------------------------------------------------------------------------------------

#: The fields stored per reader: all but ``start``, which only places a new reader.
STORED_FIELDS: tuple[str, ...] = tuple(f.name for f in attrs.fields(ReaderConfig) if f.name != "start")
SINK_FIELDS = ("expire_to", "dead_letter")
#: Fields added after the settings file's first layout, stored only when they are not their
#: default (docs/format.md [F-33]): a file that never set them is the same bytes as before, and
#: a version that does not know them still reads it (an unknown key voids a reader's line, F-34).
SPARSE_DEFAULTS: dict[str, Any] = {"key_order": False}

#: A sink as stored: ``None``, ``{"queue": path}`` (a queue named by its directory; a relative
#: path is relative to the queue directory) or ``{"callable": description}`` (not storable: the
#: reader had a sink only a process can provide).
SinkSpec = Union[dict[str, str], None]


def _queue_dir_of(sink: object) -> str | None:
    """The directory of a queue sink (a ``JournaledQueue`` or a client of one), else ``None``.
    Duck-typed, as config.py sits below the queue: both have a str ``path`` and ``is_owner``."""
    path = getattr(sink, "path", None)
    if isinstance(path, str) and hasattr(type(sink), "is_owner") and callable(getattr(sink, "put", None)):
        return path
    return None


def sink_spec(sink: object, queue_dir: str) -> SinkSpec:
    """How ``sink`` is stored for a reader of the queue in ``queue_dir``.

    A queue sink is named by its directory: relative to ``queue_dir`` (``../dead``) when both
    directories have the same parent, so the pair can be moved together; absolute otherwise.
    Anything else (a function, an object with ``put``) is ``{"callable": <its description>}``.
    """
    if sink is None:
        return None
    where = _queue_dir_of(sink)
    if where is None:
        return {"callable": _describe(sink)}
    return sink_spec_of_dir(where, queue_dir)


def _describe(sink: object) -> str:
    kind = sink if callable(sink) and hasattr(sink, "__qualname__") else type(sink)
    module, name = getattr(kind, "__module__", None), getattr(kind, "__qualname__", type(kind).__name__)
    return (f"{module}.{name}" if module else str(name))[:200]  # informative only


def sink_dir(spec: SinkSpec, queue_dir: str) -> str | None:
    """The absolute directory a stored queue sink names (``None`` for no sink or a callable)."""
    if spec is None or "queue" not in spec:
        return None
    return os.path.normpath(os.path.join(os.path.abspath(queue_dir), spec["queue"]))


def reader_settings(config: ReaderConfig, queue_dir: str) -> dict[str, Any]:
    """The stored form of ``config`` (a JSON-ready dict of :data:`STORED_FIELDS`) for a reader
    of the queue in ``queue_dir``.  Pure: no file is touched."""
    out: dict[str, Any] = {}
    for field in STORED_FIELDS:
        value = getattr(config, field)
        out[field] = sink_spec(value, queue_dir) if field in SINK_FIELDS else value
    return _sparse(out)


def _sparse(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` without the :data:`SPARSE_DEFAULTS` fields that hold their default."""
    for field, default in SPARSE_DEFAULTS.items():
        if field in settings and settings[field] is default:
            del settings[field]
    return settings


def _check_spec(field: str, spec: object) -> SinkSpec:
    if spec is None:
        return None
    if (
        isinstance(spec, dict)
        and len(spec) == 1
        and next(iter(spec)) in ("queue", "callable")
        and isinstance(next(iter(spec.values())), str)
        and next(iter(spec.values()))
    ):
        return spec
    raise ValueError(
        f"{field}: a stored sink is null, {{'queue': path}} or {{'callable': name}}, got {spec!r}"
    )


def reader_config_from_settings(
    settings: dict[str, Any], open_sink: Callable[[str, dict[str, str]], Sink | None] | None = None
) -> ReaderConfig:
    """The :class:`ReaderConfig` stored as ``settings`` (the inverse of :func:`reader_settings`).

    Missing fields take their defaults (a file written before a field existed); an unknown
    field or a bad value raises ``ValueError`` naming it.  Each stored sink is passed to
    ``open_sink(field, spec)``, which returns the sink to use, or ``None`` when it cannot be
    provided; without ``open_sink`` every stored sink is ``None``.  ``start`` is the default
    (it is not a setting of an existing reader)."""
    if not isinstance(settings, dict):
        raise ValueError(f"reader settings must be a JSON object, got {type(settings).__name__}")
    unknown = sorted(set(settings) - set(STORED_FIELDS))
    if unknown:
        raise ValueError(f"unknown reader settings {unknown!r}")
    kwargs: dict[str, Any] = {}
    for field, value in settings.items():
        if field in SINK_FIELDS:
            spec = _check_spec(field, value)
            kwargs[field] = None if spec is None or open_sink is None else open_sink(field, spec)
        else:
            kwargs[field] = value
    try:
        return ReaderConfig(**kwargs)
    except TypeError as exc:  # attrs' instance_of says TypeError: a bad value all the same
        raise ValueError(str(exc)) from None


def merge_settings(stored: dict[str, Any] | None, changes: dict[str, Any], queue_dir: str) -> dict[str, Any]:
    """``stored`` (``None``: the defaults) with only the fields named in ``changes`` replaced: a
    change never drops a setting it did not name.  Plain fields take what ``ReaderConfig``
    takes; a sink takes ``None``, a sink object (a queue is stored by its directory), a
    directory path (``str``/``PathLike``, relative to the current directory) or a stored form
    ``{"queue": path}`` (relative to ``queue_dir``).  Raises ``ValueError`` for an unknown field
    or a value ``ReaderConfig`` refuses (nothing is changed then)."""
    unknown = sorted(set(changes) - set(STORED_FIELDS))
    if unknown:
        raise ValueError(f"unknown reader settings {unknown!r} (known: {', '.join(STORED_FIELDS)})")
    merged = dict(stored) if stored is not None else reader_settings(ReaderConfig(), queue_dir)
    for field, value in changes.items():
        if field not in SINK_FIELDS:
            merged[field] = value
        elif isinstance(value, (str, os.PathLike)):
            merged[field] = sink_spec_of_dir(os.fspath(value), queue_dir)
        elif isinstance(value, dict):
            merged[field] = _check_spec(field, value)
        else:
            _check_sink(None, attrs.fields_dict(ReaderConfig)[field], value)
            merged[field] = sink_spec(value, queue_dir)
    reader_config_from_settings(merged)  # every value checked as a ReaderConfig checks it
    return _sparse(merged)


def sink_spec_of_dir(directory: str, queue_dir: str) -> dict[str, str]:
    """The stored form of a queue sink given by its directory (see :func:`sink_spec`)."""
    if not directory:
        raise ValueError("a destination directory must not be empty")
    where, home = os.path.abspath(directory), os.path.abspath(queue_dir)
    if os.path.dirname(where) == os.path.dirname(home):
        return {"queue": os.path.relpath(where, home)}
    return {"queue": where}
