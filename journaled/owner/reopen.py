"""What a reopened queue learns from its readers' checkpoints, before and after the journal opens.

Pure decisions over :class:`~journaled.format.smallfiles.CheckpointData` (plus reading the files through
disk/checkpointfiles.py), kept out of queue.py so the rules are in one place and testable alone:

* :func:`read_states`: every known reader (registry and checkpoint files) with its checkpoint,
  or ``None`` when it is missing or damaged (that reader replays from the earliest item);
* :func:`id_floor`: the journal never hands out an id a reader has already seen, even if the
  journal lost its tail;
* :func:`fit_to_journal`: a checkpoint whose head lies outside the journal is clamped, and
  ids beyond the journal's end lose their commits and error counts (they will be reused).
"""

from __future__ import annotations

import logging

import attrs

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
    if state.head > end or state.head < first:
        log.warning(
            "reader %s: checkpoint head %d lies outside the journal [%d, %d]; clamped",
            rname,
            state.head,
            first,
            end,
        )
        head = min(max(state.head, first), end)
        return CheckpointData(
            head,
            done=tuple(i for i in state.done if head <= i < end),
            errors=tuple((i, c) for i, c in state.errors if head <= i < end),
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
