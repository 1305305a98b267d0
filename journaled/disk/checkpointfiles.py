"""A reader's durable state on disk: its checkpoint file, and the queue's reader registry.

Both are small files replaced atomically (temp file, fsync, rename, fsync of the directory), so a
crash leaves the old or the new version, never a mix.  A damaged or missing file is never fatal:
the caller falls back to replaying, which may redeliver but never loses.
"""

from __future__ import annotations

import logging
import os

from journaled.config import validate_name
from journaled.disk import fileio
from journaled.errors import CorruptJournal, InvalidName
from journaled.format.smallfiles import (
    CheckpointData,
    decode_checkpoint,
    decode_crc_text,
    encode_checkpoint,
    encode_crc_text,
)

log = logging.getLogger("journaled")

_REGISTRY_MAGIC = "journaled-readers 1"


def checkpoint_path(directory: str, queue: str, reader: str) -> str:
    """``<queue>.read.<reader>`` inside ``directory`` (kestrel's naming)."""
    return os.path.join(directory, f"{queue}.read.{reader}")


def registry_path(directory: str, queue: str) -> str:
    return os.path.join(directory, f"{queue}.readers")


def write_checkpoint(path: str, data: CheckpointData, mode: int) -> None:
    fileio.write_atomic(path, encode_checkpoint(data), mode)


def read_checkpoint(path: str) -> CheckpointData | None:
    """The checkpoint at ``path``; ``None`` (with a warning) if it is missing or damaged."""
    try:
        raw = fileio.ops.read_file(path)
    except FileNotFoundError:
        log.warning("checkpoint %s is missing; the reader replays from the earliest item", path)
        return None
    except fileio.NotRegularFile as exc:  # a FIFO must not block the open: as damaged
        log.warning("checkpoint %s %s; the reader replays from the earliest item", path, exc.strerror)
        return None
    try:
        return decode_checkpoint(raw, path)
    except CorruptJournal as exc:
        log.warning("%s; the reader replays from the earliest item", exc)
        return None


def list_checkpoints(directory: str, queue: str) -> list[str]:
    """Reader names that have a checkpoint file."""
    prefix = f"{queue}.read."
    names = []
    for entry in os.listdir(directory):
        if entry.startswith(prefix):
            try:
                names.append(validate_name(entry[len(prefix) :], "reader name"))
            except InvalidName:
                continue
    return sorted(names)


def write_registry(path: str, names: list[str], mode: int) -> None:
    fileio.write_atomic(path, encode_crc_text(_REGISTRY_MAGIC, sorted(names)), mode)


def read_registry(path: str) -> list[str] | None:
    """Names recorded in the registry, or ``None`` if it is missing or damaged."""
    try:
        raw = fileio.ops.read_file(path)
    except FileNotFoundError:
        return None
    except fileio.NotRegularFile as exc:
        log.warning("reader registry %s %s; using checkpoint files alone", path, exc.strerror)
        return None
    entries = decode_crc_text(raw, _REGISTRY_MAGIC)
    if entries is None:
        log.warning("reader registry %s is damaged; using checkpoint files alone", path)
        return None
    out = []
    for line in entries:
        try:
            out.append(validate_name(line, "reader name"))
        except InvalidName:
            log.warning("reader registry %s lists an invalid name %r; ignored", path, line)
    return out
