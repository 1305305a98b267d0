"""What a reopened queue learns from its readers' checkpoints, before and after the journal opens.

Pure decisions over :class:`~journaled.format.smallfiles.CheckpointData` (plus reading the files through
disk/checkpointfiles.py), kept out of queue.py so the rules are in one place and testable alone:

* :func:`read_states`: every known reader (registry and checkpoint files) with its checkpoint,
  or ``None`` when it is missing or damaged (that reader replays from the earliest item);
* :func:`id_floor`: the journal never hands out an id a reader has already seen, even if the
  journal lost its tail;
* :func:`fit_to_journal`: a checkpoint whose head lies outside the journal is clamped, and
  ids beyond the journal's end lose their commits and error counts (they will be reused);
* :func:`stored_config`: the :class:`~journaled.config.ReaderConfig` a reader's stored settings
  give (docs/design.md, "Durable settings"), with a policy whose destination is missing suspended
  rather than dropping items; :func:`unprovided_sinks` says which (for a health flag).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any

import attrs

from journaled.config import ReaderConfig, Sink, reader_config_from_settings
from journaled.disk import checkpointfiles as ckp
from journaled.format.smallfiles import CheckpointData

log = logging.getLogger("journaled")


def read_states(directory: str, queue: str) -> tuple[list[str] | None, dict[str, CheckpointData | None]]:
    """``(registered names or None if the registry is missing/damaged, {reader: state})``."""
    registered = ckp.read_registry(ckp.registry_path(directory, queue))
    names = set(ckp.list_checkpoints(directory, queue)) | set(registered or ())
    states = {
        rname: ckp.read_checkpoint(ckp.checkpoint_path(directory, queue, rname)) for rname in sorted(names)
    }
    return registered, states


def id_floor(states: dict[str, CheckpointData | None]) -> int:
    """The smallest id no reader has seen (head, out-of-order commits, error counts)."""
    seen = [1]
    for st in states.values():
        if st is None:
            continue
        seen.append(st.head)
        if st.done:
            seen.append(max(st.done) + 1)
        if st.errors:
            seen.append(max(i for i, _ in st.errors) + 1)
    return max(seen)


def fit_to_journal(rname: str, state: CheckpointData | None, first: int, end: int) -> CheckpointData:
    """The state to load for reader ``rname`` given a journal holding ids ``[first, end)``."""
    if state is None:
        return CheckpointData(head=first)
    if state.head < first:
        # files this reader had not passed were archived (retention, or removed by hand) while
        # its checkpoint was behind: not damage, but its items first..head-1 are gone
        log.warning(
            "reader %s: items %d..%d were archived before it read them (the journal now starts "
            "at %d); it goes on there",
            rname, state.head, first - 1, first,
        )  # fmt: skip
    elif state.head > end:
        log.warning(
            "reader %s: checkpoint head %d lies beyond the journal's end %d (its tail was lost); "
            "clamped", rname, state.head, end,
        )  # fmt: skip
    if state.head > end or state.head < first:
        head = min(max(state.head, first), end)
        return CheckpointData(
            head,
            done=tuple(i for i in state.done if head <= i < end),
            errors=tuple((i, c) for i, c in state.errors if head <= i < end),
            counts=state.counts,
        )
    if any(i >= end for i in state.done) or any(i >= end for i, _ in state.errors):
        # the journal lost its tail: those ids will be reused by new items, which must not
        # inherit the old items' commits or error counts
        return attrs.evolve(
            state,
            done=tuple(i for i in state.done if i < end),
            errors=tuple((i, c) for i, c in state.errors if i < end),
        )
    return state


#: The policy that sends items to each sink: suspended while its sink cannot be provided.
_SENDS_TO = {"dead_letter": "max_errors", "expire_to": "max_age"}


def stored_config(
    rname: str,
    settings: dict[str, Any] | None,
    provide: Callable[[str, dict[str, str]], Sink | None],
    stacklevel: int = 3,
) -> ReaderConfig:
    """The config reader ``rname`` runs with, given its stored ``settings`` (``None``: defaults).

    ``provide(field, spec)`` gives the sink for each stored one (``None`` if it cannot): opens a
    queue ``{"queue": path}``; a ``{"callable": ...}`` only a process that still holds it can give.
    A sink this process cannot provide -- a callable (``{"callable": ...}``: only the process that
    set it has it), or a queue that cannot be opened -- never makes items vanish: the policy that
    would hand items to it (``max_errors`` for ``dead_letter``, ``max_age`` for ``expire_to``) is
    suspended, so those items stay in the reader (retried, with the stored ``retry_delay``, or
    kept) until a process passes the sink with ``q.reader(name, config)``; a ``UserWarning`` and
    a log warning say so.  Settings that do not form a valid config are logged and give the
    defaults (the file is kept)."""
    if settings is None:
        return ReaderConfig()
    missing: list[str] = []

    def open_sink(field: str, spec: dict[str, str]) -> Sink | None:
        sink = provide(field, spec)
        if sink is None:
            missing.append(field)
        return sink

    try:
        config = reader_config_from_settings(settings, open_sink)
    except ValueError as exc:
        log.warning("reader %s: its stored settings are invalid (%s); it uses the defaults", rname, exc)
        return ReaderConfig()
    if missing:
        suspended: dict[str, Any] = {
            _SENDS_TO[f]: None for f in missing if getattr(config, _SENDS_TO[f]) is not None
        }
        names = ", ".join(f"{f}={settings[f]!r}" for f in missing)
        if suspended:
            outcome = f"{', '.join(sorted(suspended))} suspended (its items are kept, never dropped)"
        else:  # e.g. expire_to without max_age: items with their own ttl still expire
            outcome = "items bound for it are dropped and counted"
        message = (
            f"reader {rname}: its stored sink(s) {names} cannot be provided by this process; "
            f"{outcome} until q.reader({rname!r}, config) passes the sink"
        )
        log.warning("%s", message)
        warnings.warn(message, UserWarning, stacklevel=stacklevel)
        config = attrs.evolve(config, **suspended)
    return config


def unprovided_sinks(settings: dict[str, Any] | None, config: ReaderConfig) -> tuple[str, ...]:
    """The sinks stored in ``settings`` that the reader running ``config`` lacks (sorted): a
    callable of another process, a destination that could not be opened.  What a health flag
    reports (the policy sending items there is suspended, see :func:`stored_config`)."""
    if settings is None:
        return ()
    return tuple(f for f in sorted(_SENDS_TO) if settings.get(f) is not None and getattr(config, f) is None)
