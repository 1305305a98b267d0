"""``ReaderConfig``'s docstring says what actually happens (issue 38, point 5): a queue given as
``expire_to`` or ``dead_letter`` receives a dead-letter envelope, not the bare payload, and the
settings are stored with the queue."""

from __future__ import annotations

import inspect
import re
import time

import journaled
from journaled import DeadLetter, JournaledQueue, QueueConfig, ReaderConfig


def field_doc(name: str) -> str:
    """The paragraph ``ReaderConfig``'s docstring gives the field ``name``."""
    # cleaned as help() shows it: Python 3.13 strips the common indentation when it compiles a
    # docstring, earlier versions keep it
    doc = inspect.cleandoc(ReaderConfig.__doc__ or "")
    match = re.search(rf"^ {{4}}{name}: (.*?)(?=^ {{4}}\w+: |\Z)", doc, re.S | re.M)
    assert match, f"no entry for {name} in ReaderConfig's docstring"
    return " ".join(match.group(1).split())


def test_a_queue_given_as_expire_to_receives_the_envelope_the_docstring_names(tmp_path):
    with (
        JournaledQueue(tmp_path / "expired", QueueConfig(sync="always")) as sink,
        JournaledQueue(tmp_path / "q", QueueConfig(sync="always")) as q,
    ):
        seen = sink.reader("ops")
        q.reader("r", ReaderConfig(expire_to=sink))
        q.put(b"stale", expire_at=time.time() - 1)  # at or before now: already expired
        q.run_policies()
        received = seen.get(timeout=5).data
    assert received != b"stale"  # not the bare payload...
    letter = DeadLetter.decode(received)  # ...an envelope around it
    assert (letter.data, letter.kind, letter.reader) == (b"stale", "expired", "r")
    doc = field_doc("expire_to")
    assert "DeadLetter.decode" in doc and "envelope" in doc, doc
    assert "item.data`` is put there" not in doc, doc
    assert "envelope" in field_doc("dead_letter")


def test_the_docstring_says_the_settings_are_stored_with_the_queue():
    doc = " ".join((journaled.ReaderConfig.__doc__ or "").split())
    assert "stored with the queue" in doc, doc[:400]
