"""``journaled config PATH [reader NAME --option value ... | queue --retention-age S ...]``: a queue's
stored settings.

Shown from the settings file alone (docs/format.md, section 15): no lock taken, nothing created,
whether or not a process owns the queue.  Changed through the queue: at its owner when one runs
(the change is stored, logged and applied there at once), else by opening the queue for the
change and closing it.  Only the settings named on the command line change
(``JournaledQueue.set_reader_settings``): a change never drops a setting it did not name.
The queue's retention and compression (``queue --compression zstd|none``) are changed by opening
the queue as its owner with the new values, so that is refused while another process owns the
queue (docs/design.md, "Durable settings").
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from journaled.cli.inspection import UsageError
from journaled.config import SPARSE_DEFAULTS, STORED_FIELDS, ReaderConfig, reader_settings
from journaled.disk import checkpointfiles
from journaled.disk.settingsfile import load_settings, settings_path
from journaled.errors import CorruptJournal, UnknownReader
from journaled.offline.snapshot import NotAQueue, queue_name
from journaled.owner.destinations import destination_problem

#: Options of ``journaled config PATH reader NAME``: field -> how its value is read.  ``none``
#: clears a limit (or a destination).
_INT_FIELDS = ("max_memory", "max_items", "max_size", "max_errors")
_FLOAT_FIELDS = ("max_age", "open_read_timeout", "retry_delay", "retry_delay_max")
_DEST_FIELDS = ("expire_to", "dead_letter")
_BOOL_FIELDS = ("discard_old_when_full", "key_order")


def _number(kind: type[int] | type[float]) -> Any:
    def parse(text: str) -> int | float | None:
        if text.lower() == "none":
            return None
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number (or 'none'): {text!r}") from None

    return parse


def _yes_no(text: str) -> bool:
    if text.lower() in ("yes", "true", "1"):
        return True
    if text.lower() in ("no", "false", "0"):
        return False
    raise argparse.ArgumentTypeError(f"yes or no, not {text!r}")


def _destination(text: str) -> str | None:
    return None if text.lower() == "none" else text


def _check_destination(field: str, path: str) -> None:
    """Refuse (:class:`UsageError`) a destination the owner would turn into a queue beside other
    things (a typo: ``--dead-letter ~``), as ``serve`` and every other command refuse such a
    path: a directory holding something but no queue, several queues, or a file.  A queue, an
    empty directory and a missing one (the owner opens it once it exists, never creates it)
    are taken."""
    problem = destination_problem(path)
    if problem is not None:
        raise UsageError(f"--{field.replace('_', '-')} {problem}")


def _changes(args: argparse.Namespace) -> dict[str, Any]:
    """The settings named on the command line (and in ``--from FILE``), nothing else."""
    changes: dict[str, Any] = {}
    if args.from_file is not None:
        try:
            with open(args.from_file, encoding="utf-8") as f:
                loaded = json.load(f)
        except (OSError, ValueError) as exc:
            raise UsageError(f"--from {args.from_file}: {exc}") from None
        if not isinstance(loaded, dict):
            raise UsageError(
                f"--from {args.from_file}: a JSON object of settings, not {type(loaded).__name__}"
            )
        changes.update(loaded)
    for field in (*_INT_FIELDS, *_FLOAT_FIELDS, *_DEST_FIELDS, *_BOOL_FIELDS):
        value = getattr(args, field, argparse.SUPPRESS)
        if value is not argparse.SUPPRESS:
            changes[field] = value
    for field in _DEST_FIELDS:  # a destination is a directory: relative to where the command runs
        if isinstance(changes.get(field), str):
            changes[field] = os.path.abspath(changes[field])
            _check_destination(field, changes[field])
    unknown = sorted(set(changes) - set(STORED_FIELDS))
    if unknown:
        raise UsageError(f"unknown settings {unknown} (known: {', '.join(STORED_FIELDS)})")
    return changes


def _show(path: str, name: str, as_json: bool) -> int:
    try:
        data = load_settings(settings_path(path, name))
    except CorruptJournal as exc:
        print(f"journaled config: {exc}")
        return 1
    stored, limits = data.readers, dict(data.queue)
    codec = limits.pop("compression", None)  # not a limit: shown on a line of its own
    registry = checkpointfiles.read_registry(checkpointfiles.registry_path(path, name)) or []
    defaults = reader_settings(ReaderConfig(), path)
    shown = {r: SPARSE_DEFAULTS | (stored.get(r) or defaults) for r in sorted(set(registry) | set(stored))}
    defaults = SPARSE_DEFAULTS | defaults
    if as_json:
        out = {"queue": name, "path": path, "retention": limits, "compression": codec, "readers": shown}
        print(json.dumps(out, indent=2, sort_keys=True))
        return 0
    print(f"queue {name} at {path}")
    kept = (
        ", ".join(f"{k} {json.dumps(v)}" for k, v in sorted(limits.items()))
        or "none: until every reader is past"
    )
    print(f"  retention: {kept}")
    print(f"  compression: {codec or 'none'} (of new put_many batches)")
    if not shown:
        print("  no readers")
    for reader, settings in shown.items():
        changed = [f for f in STORED_FIELDS if settings.get(f) != defaults.get(f)]
        print(f"  reader {reader}: {'its own settings' if changed else 'the defaults'}")
        for field in changed:
            print(f"    {field}: {json.dumps(settings.get(field))}")
    return 0


def _change(path: str, name: str, reader: str, changes: dict[str, Any], as_json: bool) -> int:
    from journaled.queue import JournaledQueue  # the one command here that opens the queue

    if not changes:
        raise UsageError("name at least one setting to change (see journaled config --help)")
    with JournaledQueue(path, name=name) as q:
        where = "the owner (live)" if not q.is_owner else "this process (no owner was running)"
        try:
            settings = q.set_reader_settings(reader, changes)
        except UnknownReader:
            raise UsageError(f"no reader {reader!r} (readers: {', '.join(q.readers()) or 'none'})") from None
        except (TypeError, ValueError) as exc:
            raise UsageError(str(exc)) from None
    if as_json:
        print(json.dumps({"reader": reader, "settings": settings}, indent=2, sort_keys=True))
    else:
        print(f"reader {reader}: changed at {where}: {', '.join(sorted(changes))}")
        for field in STORED_FIELDS:
            print(f"  {field}: {json.dumps(settings.get(field, SPARSE_DEFAULTS.get(field)))}")
    return 0


def _retention(value: str) -> float | None:
    return None if value.lower() == "none" else float(value)


def _change_queue(path: str, name: str, args: argparse.Namespace, as_json: bool) -> int:
    """Store new retention limits: by opening the queue as its owner with them, which stores and
    logs them as an explicit change (config.py, ``retention_settings``).  Refused while another
    process owns the queue: its retention is the one it opened with until its next open."""
    from journaled.config import NO_LIMIT, QueueConfig
    from journaled.queue import JournaledQueue

    given = {k: getattr(args, k) for k in ("retention_age", "retention_bytes") if hasattr(args, k)}
    codec = getattr(args, "compression", None)
    if not given and codec is None:
        raise UsageError(
            "name --retention-age and/or --retention-bytes (a number, or none), or --compression zstd|none"
        )
    wanted: dict[str, Any] = {k: NO_LIMIT if v is None else v for k, v in given.items()}
    if codec is not None:
        wanted["compression"] = codec  # "none" removes it, as -1 removes a limit
    if "retention_bytes" in wanted and wanted["retention_bytes"] != NO_LIMIT:
        if wanted["retention_bytes"] != int(wanted["retention_bytes"]):
            raise UsageError("--retention-bytes must be a whole number of bytes")
        wanted["retention_bytes"] = int(wanted["retention_bytes"])
    try:
        cfg = QueueConfig(**wanted)
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    with JournaledQueue(path, cfg, name=name) as q:
        if not q.is_owner:
            what = " and ".join(w for w, on in (("retention", given), ("compression", codec)) if on)
            what += " are" if given and codec else " is"
            passed = ", ".join(f"{k}=..." for k in (*given, *(("compression",) if codec else ())))
            print(
                f"journaled config: another process owns {path}; {what} applied when a process "
                "opens the queue as its owner: stop the owner and run this again, or pass "
                f"QueueConfig({passed}) where it opens the queue"
            )
            return 1
    limits = dict(load_settings(settings_path(path, name)).queue)
    stored_codec = limits.pop("compression", None)
    if as_json:
        out = {"queue": name, "retention": limits, "compression": stored_codec}
        print(json.dumps(out, indent=2, sort_keys=True))
    else:
        kept = ", ".join(f"{k} {json.dumps(v)}" for k, v in sorted(limits.items())) or "no limit"
        print(f"queue {name}: retention stored: {kept}; compression of new batches: {stored_codec or 'none'}")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    path = os.path.abspath(args.path)
    try:
        name = queue_name(path, args.name)
    except NotAQueue as exc:
        raise UsageError(f"{exc.path}: {exc.reason}") from None
    if args.target is None:
        return _show(path, name, args.json)
    if args.target == "queue":
        if args.reader is not None:
            raise UsageError("journaled config PATH queue --retention-age S --retention-bytes N")
        return _change_queue(path, name, args, args.json)
    if any(hasattr(args, k) for k in ("retention_age", "retention_bytes", "compression")):
        raise UsageError("retention is a queue's setting: journaled config PATH queue --retention-age ...")
    if args.target != "reader" or args.reader is None:
        raise UsageError("to change settings: journaled config PATH reader NAME --option value ...")
    return _change(path, name, args.reader, _changes(args), args.json)


def add_config_command(sub: Any) -> None:
    p = sub.add_parser(
        "config",
        help="show a queue's stored reader settings, or change a reader's (live if an owner runs)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("path", help="the queue directory")
    p.add_argument(
        "target",
        nargs="?",
        choices=("reader", "queue"),
        help="'reader' to change a reader's settings, 'queue' the queue's retention",
    )
    p.add_argument("reader", nargs="?", help="the reader whose settings change")
    p.add_argument("--name", help="the queue's name, when the directory holds several")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--from", dest="from_file", metavar="FILE", help="a JSON object of settings to change")
    for field in _INT_FIELDS:
        p.add_argument(
            f"--{field.replace('_', '-')}", dest=field, type=_number(int), default=argparse.SUPPRESS
        )
    for field in _FLOAT_FIELDS:
        p.add_argument(
            f"--{field.replace('_', '-')}", dest=field, type=_number(float), default=argparse.SUPPRESS
        )
    for field in _BOOL_FIELDS:
        p.add_argument(
            f"--{field.replace('_', '-')}",
            dest=field,
            type=_yes_no,
            default=argparse.SUPPRESS,
            metavar="yes|no",
        )
    for field in _DEST_FIELDS:
        p.add_argument(
            f"--{field.replace('_', '-')}",
            dest=field,
            type=_destination,
            default=argparse.SUPPRESS,
            metavar="DIR|none",
            help="a queue directory to send these items to (none: drop them, counted)",
        )
    for field, what in (("retention_age", "seconds"), ("retention_bytes", "bytes")):
        p.add_argument(
            f"--{field.replace('_', '-')}",
            dest=field,
            type=_retention,
            default=argparse.SUPPRESS,
            metavar=f"{what.upper()}|none",
            help=f"with 'queue': archive journal files past this many {what} (none: no limit)",
        )
    p.add_argument(
        "--compression",
        choices=("zstd", "none"),
        default=argparse.SUPPRESS,
        help="with 'queue': compress new put_many batches with zstd (none: write them plain)",
    )
    p.set_defaults(func=cmd_config)
