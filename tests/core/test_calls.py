"""The consumer's compiled calls (journaled/core/calls.py): each answers "not done" rather than
bending a rule, and never leaves the queue lock held."""

from __future__ import annotations

import pytest

from journaled import JournaledQueue, QueueClosed, QueueConfig, UnknownRead
from journaled.core.calls import EMPTY, NOT_NOW, commit_now, take_now


class _InLine:
    """A blocked get standing in the core's line (what ``Reader.get`` puts there)."""

    def __init__(self) -> None:
        self.items: list[object] = []

    def deliver(self, item: object) -> None:
        self.items.append(item)

    def wake(self) -> None:
        pass


@pytest.fixture
def q(tmp_path):
    with JournaledQueue(str(tmp_path / "q"), QueueConfig(sync="never")) as q:
        yield q


def lock_is_free(core) -> bool:
    """The call let go of the queue's lock.  It is the queue's one lock, which its own threads
    (the checkpointer, the periodic sync) also take for a moment: a try without waiting failed
    once in CI.  A lock left held by this thread (a plain Lock) is never had within the wait."""
    if core.lock.acquire(timeout=10):
        core.lock.release()
        return True
    return False


def test_take_now_hands_out_the_next_item_as_an_open_read(q) -> None:
    r = q.reader("r")
    q.put_many([b"a", b"b"])
    item = take_now(r.core)
    assert item is not None and item.data == b"a" and item.id in r.core.open
    assert lock_is_free(r.core)


def test_take_now_on_an_empty_reader_says_empty(q) -> None:
    r = q.reader("r")
    assert take_now(r.core) == EMPTY
    assert lock_is_free(r.core)


def test_take_now_never_goes_ahead_of_a_blocked_get_in_line(q) -> None:
    r = q.reader("r")
    core = r.core
    q.put(b"x")
    stand_in = _InLine()
    with core.lock:
        core.join(stand_in)  # a get already in line: the next item is its to take, not ours
    assert take_now(core) == NOT_NOW
    with core.lock:
        assert [i.data for i in core.mem] == [b"x"] and not core.open  # still waiting
        core.leave(stand_in)
    item = take_now(core)
    assert item is not None and item.data == b"x"
    assert lock_is_free(core)


def test_a_closed_reader_takes_nothing_and_get_says_closed(q) -> None:
    r = q.reader("r")
    q.put(b"a")
    q.close()
    assert take_now(r.core) == NOT_NOW
    with pytest.raises(QueueClosed):
        r.get(block=False)
    assert lock_is_free(r.core)


def test_commit_now_on_a_closed_reader_commits_nothing(tmp_path) -> None:
    path = str(tmp_path / "q")
    q = JournaledQueue(path, QueueConfig(sync="never"))
    r = q.reader("r")
    q.put(b"a")
    item = r.get(block=False)
    q.close()
    assert commit_now(r.core, item) is False
    with pytest.raises(QueueClosed):
        r.commit(item)
    with JournaledQueue(path) as again:  # not committed: delivered again
        assert again.reader("r").get(block=False).data == b"a"


def test_a_commit_that_raises_leaves_the_lock_free(q) -> None:
    r = q.reader("r")
    q.put(b"a")
    item = r.get(block=False)
    r.commit(item)
    with pytest.raises(UnknownRead):
        commit_now(r.core, item)  # committed already
    assert lock_is_free(r.core)
    with pytest.raises(TypeError):
        commit_now(r.core, "1")
    assert lock_is_free(r.core)
