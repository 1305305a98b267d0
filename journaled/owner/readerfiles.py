"""Each reader's durable state on disk, and what archiving may delete because of it.

libkestrel's ``Journal`` keeps each reader's head and done set next to the files; here that job
is :class:`ReaderFiles`: it writes checkpoints (never claiming more than the journal durably
holds), the reader registry and the queue's durable settings (disk/settingsfile.py), removes a
reader's files, and archives journal files once every
reader's *checkpointed* head (and every external bookmark) has passed them, or once they are past
the queue's retention (``QueueConfig.retention_age`` / ``retention_bytes``, stored as the
settings file's queue line).

Locks: ``ReaderFiles.lock`` serializes every checkpoint/registry/settings write and removal and the
archiving decision.  It is taken *before* the queue lock (``queue_lock``), never after it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from journaled.config import QueueConfig, retention_limits, retention_settings, stored_dedup_window
from journaled.disk import checkpointfiles as ckp
from journaled.disk import fileio
from journaled.disk import settingsfile as sf
from journaled.disk.bookmarks import read_bookmarks
from journaled.format.display import escape
from journaled.format.smallfiles import CheckpointData, SettingsData
from journaled.log.journal import Journal, now_ms

if TYPE_CHECKING:
    from journaled.core.readercore import ReaderCore

log = logging.getLogger("journaled")


class ReaderFiles:
    """Checkpoints, registry and archiving of one open queue."""

    def __init__(
        self,
        directory: str,
        name: str,
        config: QueueConfig,
        journal: Journal,
        queue_lock: threading.Lock,
        cores: Callable[[], Sequence[ReaderCore]],
        before_archive: Callable[[], object] | None = None,
    ) -> None:
        self.directory = directory
        # called (with ``lock`` held, not the queue lock) before any journal file is archived:
        # the dedup index must hold the keys of those files first (owner/dedup.py)
        self.before_archive = before_archive
        self.name = name
        self.config = config
        self.journal = journal
        self.queue_lock = queue_lock
        self.cores = cores  # the open readers' cores (read under the queue lock)
        # where passed files go (None: deleted); relative to the queue directory
        self.archive_dir = None if config.archive_dir is None else os.path.join(directory, config.archive_dir)
        if self.archive_dir is not None:
            if os.path.realpath(self.archive_dir) == os.path.realpath(directory):
                raise ValueError(f"archive_dir {config.archive_dir!r} is the queue directory itself")
            fileio.make_dirs(self.archive_dir, 0o700)
        self.lock = threading.Lock()
        # each reader's head as its checkpoint file last recorded it (guarded by the queue lock);
        # archiving goes by these, so after a crash every checkpoint still points into the journal
        self.heads: dict[str, int] = {}
        self.archive_wanted = True  # a checkpointed head moved, or a reader left
        self.skipped_entries: tuple[str, ...] = ()  # of external/, at the last archiving pass
        self.settings_path = sf.settings_path(directory, name)
        # the stored settings as the file holds them (guarded by ``lock``); a damaged file was
        # logged and counts as empty, kept until a change of settings replaces it
        self.settings = sf.read_settings(self.settings_path) or SettingsData()
        self.retention = self._settle_retention()  # (age seconds, bytes), each None for no limit
        self.dedup_window = self._stored_dedup_window()  # seconds, or None: off

    def _settle_retention(self) -> tuple[float | None, int | None]:
        """Apply ``config``'s retention over the stored queue line (``None`` keeps, ``-1``
        removes, a value replaces); a change is written before the queue opens, and logged.  A
        stored line this version cannot apply is logged and gives no limit: never archive
        more than asked."""
        stored = self.settings.queue
        wanted = retention_settings(self.config, stored)
        if wanted != stored:
            data = attrs.evolve(self.settings, queue=wanted)
            sf.write_settings(self.settings_path, data, self.config.file_mode)
            self.settings = data
            log.info("queue %s: queue settings changed to %s", self.directory, wanted or "none")
        try:
            return retention_limits(wanted)
        except (TypeError, ValueError) as exc:
            log.warning("queue %s: stored retention %s not applied: %s", self.directory, wanted, exc)
            return None, None

    def _stored_dedup_window(self) -> float | None:
        """The stored de-duplication window (settled with the retention limits): a stored line
        this version cannot apply is logged and gives none."""
        try:
            return stored_dedup_window(self.settings.queue)
        except (TypeError, ValueError) as exc:
            log.warning("queue %s: stored dedup window not applied: %s", self.directory, exc)
            return None

    def stored(self, reader: str) -> dict[str, Any] | None:
        """``reader``'s stored settings, or ``None`` (defaults)."""
        return self.settings.readers.get(reader)

    def store(self, reader: str, settings: dict[str, Any] | None) -> bool:
        """Make ``settings`` (``None``: the defaults) ``reader``'s stored settings, durably before
        returning; ``False`` when they already were (nothing written).  Call with :attr:`lock`."""
        if self.settings.readers.get(reader) == settings:
            return False
        readers = dict(self.settings.readers)
        if settings is None:
            readers.pop(reader, None)
        else:
            readers[reader] = settings
        data = attrs.evolve(self.settings, readers=readers)
        sf.write_settings(self.settings_path, data, self.config.file_mode)
        self.settings = data
        return True

    def track(self, reader: str, head: int) -> None:
        """``reader`` exists with its checkpointed head at ``head`` (loaded from disk, or about to be
        written).  Call with the queue lock held."""
        self.heads[reader] = head

    def head_moved_back(self, reader: str, head: int) -> None:
        """A seek moved ``reader`` back to ``head``: archiving must keep what it needs from now on,
        before the next checkpoint records it.  Call with :attr:`lock` and the queue lock held."""
        self.heads[reader] = min(self.heads.get(reader, head), head)

    def forget(self, reader: str) -> None:
        """``reader`` was removed: it holds back no file from now on.  Call with the queue lock."""
        self.heads.pop(reader, None)
        self.archive_wanted = True

    def want_archiving(self) -> None:
        """A head moved: the next maintenance pass should look for files to archive.  Only sets a
        flag, so a reader core may call it with the queue lock held."""
        self.archive_wanted = True

    def path_of(self, reader: str) -> str:
        return ckp.checkpoint_path(self.directory, self.name, reader)

    def write_registry(self, names: Sequence[str]) -> None:
        """Call with :attr:`lock` held (or before the queue's threads start)."""
        ckp.write_registry(ckp.registry_path(self.directory, self.name), sorted(names), self.config.file_mode)

    def created(self, reader: str, state: CheckpointData, names: Sequence[str]) -> None:
        """A new reader exists: make it durable before it is returned.  Call with :attr:`lock`."""
        ckp.write_checkpoint(self.path_of(reader), state, self.config.file_mode)
        self.write_registry(names)

    def removed(self, reader: str, names: Sequence[str]) -> None:
        """A reader was removed: forget its files (checkpoint, settings).  Call with :attr:`lock`."""
        self.write_registry(names)
        self.store(reader, None)
        try:
            fileio.ops.unlink(self.path_of(reader))
            fileio.ops.fsync_dir(self.directory)
        except FileNotFoundError:
            pass

    def checkpoint(self) -> None:
        """Write the checkpoint of every reader whose state changed."""
        with self.lock:
            with self.queue_lock:
                todo = []
                dirty = [c for c in self.cores() if c.dirty]
                for core in dirty:
                    todo.append((core.name, core.checkpoint_state()))
                    core.mark_clean()
            if not todo:
                return
            written = 0
            try:
                # A checkpoint must never claim more than the journal durably holds.
                if self.config.sync != "never" and self.journal.dirty:
                    self.journal.sync()
                for rname, state in todo:
                    ckp.write_checkpoint(self.path_of(rname), state, self.config.file_mode)
                    written += 1
            except BaseException:
                # not written: the next checkpoint must try again, or an idle reader's file
                # would stay stale (and hold back archiving) until its state changed again
                with self.queue_lock:
                    for core in dirty[written:]:
                        core.mark_dirty()
                raise
            with self.queue_lock:
                for rname, state in todo:
                    if self.heads.get(rname, state.head) < state.head:
                        self.heads[rname] = state.head
                        self.archive_wanted = True

    def archive(self) -> None:
        """Archive the journal files every checkpointed head and external bookmark passed (with
        no reader, what every bookmark passed; with neither, nothing: everything is kept for
        the first reader), and the files past the queue's retention, whoever is behind them."""
        skipped: list[str] = []
        external = read_bookmarks(self.directory, skipped)  # out-of-process readers (disk/bookmarks.py)
        # shown by Health.skipped_entries, escaped as a terminal may show them (issue 35)
        self.skipped_entries = tuple(sorted(escape(name) for name in skipped))
        age, max_bytes = self.retention
        # Under our lock: a reader being created with start="earliest" must not have its first
        # files deleted between choosing its head and becoming one of the heads here.
        with self.lock:
            with self.queue_lock:
                # bookmarks move without telling us; time passes and puts grow the journal
                # (and while an entry is skipped: its flag goes once it is removed)
                self.archive_wanted = bool(external or skipped) or age is not None or max_bytes is not None
                cores = self.cores()
                files = []
                if cores or external:
                    heads = [self.heads.get(c.name, 0) for c in cores]
                    files = self.journal.archivable(min(heads + list(external.values())))
                if age is not None or max_bytes is not None:
                    age_ms = None if age is None else int(age * 1000)
                    past, keep = self.journal.past_retention(age_ms, max_bytes, now_ms())
                    if len(past) > len(files):
                        files = past
                        self._skip_to(keep, cores, external)
            if files:
                try:
                    if self.before_archive is not None:
                        self.before_archive()
                    self.journal.archive(files, self.archive_dir)
                except BaseException:
                    self.archive_wanted = True  # the next pass tries again, heads moved or not
                    raise

    def _skip_to(self, keep: int, cores: Sequence[ReaderCore], external: dict[str, int]) -> None:
        """Retention archives every id below ``keep``: a reader behind goes on at ``keep``, only
        its head moved (``skip_to``: what it committed out of order and its error counts above
        ``keep`` stay), the gap logged with its ids and counted; a bookmark behind is logged (its
        process finds the ids gone).  Call with both locks held."""
        for core in cores:
            if core.head >= keep:
                continue
            first = core.head
            lost = core.skip_to(keep)
            log.warning(
                "queue %s: reader %s: items %d..%d are past retention and archived; %d not yet "
                "committed are lost, it goes on at %d",
                self.directory, core.name, first, keep - 1, lost, core.head,
            )  # fmt: skip
            self.heads[core.name] = max(self.heads.get(core.name, keep), keep)
        for name, head in external.items():
            if head < keep:
                log.warning(
                    "queue %s: bookmark %s: items %d..%d are past retention and archived",
                    self.directory, name, head, keep - 1,
                )  # fmt: skip
