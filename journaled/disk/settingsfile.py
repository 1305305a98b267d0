"""A queue's durable settings on disk: ``<queue>.settings`` (docs/format.md, section 15).

Replaced atomically like a checkpoint (temp file, fsync, rename, fsync of the directory), read
through the file seam (a symbolic link in its place is refused, never followed).  A damaged file
is never fatal and never deleted: :func:`load_settings` raises a typed error for tools that must
say so, :func:`read_settings` logs a warning and gives the defaults (no stored settings), and the
first write over a damaged file keeps its bytes aside in ``<queue>.settings.damaged``.
"""

from __future__ import annotations

import logging
import os

from journaled.config import validate_name
from journaled.disk import fileio
from journaled.errors import CorruptJournal, InvalidName
from journaled.format.smallfiles import SettingsData, decode_settings, encode_settings

log = logging.getLogger("journaled")


def settings_path(directory: str, queue: str) -> str:
    """``<queue>.settings`` inside ``directory``."""
    return os.path.join(directory, f"{queue}.settings")


def load_settings(path: str) -> SettingsData:
    """The settings stored at ``path`` (empty when there is no file).

    Raises :class:`~journaled.errors.CorruptJournal` when the file is damaged (magic, CRC, a bad
    line, an invalid reader name, or not a regular file: a FIFO is never read, it would block)
    and :class:`~journaled.errors.UnsafeDirectory` when it is a symbolic link."""
    try:
        raw = fileio.ops.read_file(path)
    except FileNotFoundError:
        return SettingsData()
    except fileio.NotRegularFile as exc:  # a FIFO must not block the open: as damaged
        raise CorruptJournal(path, 0, f"settings file {exc.strerror}") from None
    data = decode_settings(raw, path)
    for name in data.readers:
        try:
            validate_name(name, "reader name")
        except InvalidName as exc:
            raise CorruptJournal(path, 0, f"settings file: {exc}") from None
    return data


def read_settings(path: str) -> SettingsData | None:
    """As :func:`load_settings`, but a damaged file is logged (a warning) and gives ``None``:
    the queue then opens with default settings and leaves the file where it is."""
    try:
        return load_settings(path)
    except CorruptJournal as exc:
        log.warning("%s; every reader uses its default settings (the file is kept)", exc)
        return None


def write_settings(path: str, data: SettingsData, mode: int) -> None:
    """Replace the settings file atomically with ``data``; durable on return.  Bytes there that
    we did not write (a damaged file) are first copied to ``<path>.damaged`` (once: an older
    copy is not overwritten)."""
    try:
        raw = fileio.ops.read_file(path)
    except (FileNotFoundError, fileio.NotRegularFile):  # no bytes of anyone's to keep
        raw = None
    if raw is not None:
        try:
            decode_settings(raw, path)
        except CorruptJournal:
            aside = path + ".damaged"
            if not os.path.lexists(aside):
                fileio.write_atomic(aside, raw, mode)
                log.warning("settings file %s was damaged: its bytes are kept in %s", path, aside)
    fileio.write_atomic(path, encode_settings(data), mode)
