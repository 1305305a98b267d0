"""A client of another process's queue under hostile conditions (issue 23, the client's side):
the owner's connection limit, replies it cannot read, a change of owner while reads are
settled, a socket that is not this directory's owner's, a bare ``fork()``, an owner that stops
answering (SIGSTOP).

The owner is a child process (tests/support/child.py) that runs the lines the test sends it;
the test process is the client.  Waits poll a condition with a deadline, never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable

import pytest

from journaled import JournaledQueue
from journaled.errors import Empty, OwnerBusy, OwnerLost, QueueForked, QueueLocked, UnsafeDirectory
from journaled.remote import clientqueue, clientreader, connections, routing
from journaled.remote import protocol as proto
from journaled.remote.connections import POOL_IDLE, Link
from support.child import Child

TIMEOUT = 120

# argv: directory, the owner's connection limit.  Each line read is run, then "done <n>" printed;
# "close" closes the queue.
OWNER = """
import sys
import journaled.remote.admission as admission
from journaled import JournaledQueue
admission.MAX_CONNECTIONS = int(sys.argv[2])
q = JournaledQueue(sys.argv[1])
r = q.reader("r")
print("ready", flush=True)
for n, line in enumerate(sys.stdin):
    if line.strip() == "close":
        break
    exec(line)
    print("done", n, flush=True)
q.close()
print("closed", flush=True)
"""


class Owner(Child):
    """The owner child: ``run(code)`` has it run one line and waits until it did."""

    def __init__(self, d: str, limit: int = 256) -> None:
        super().__init__(OWNER, d, str(limit), merge_stderr=True)
        self.runs = 0
        self.wait_for_line("ready")

    def run(self, code: str) -> list[str]:
        """Run ``code`` in the owner; the lines it printed (``out ...``)."""
        before = len(self.lines)
        self.send(code)
        marker = f"done {self.runs}"
        self.runs += 1
        self.wait_for(lambda lines: marker in lines or "<eof>" in lines)
        assert marker in self.lines, self.lines[-20:]
        return [ln[4:] for ln in self.lines[before:] if ln.startswith("out ")]


def until(test: Callable[[], object], timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not test():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def stop(child: Child) -> None:
    """SIGSTOP ``child`` and wait until it is stopped (it may still answer a request before)."""
    child.proc.send_signal(signal.SIGSTOP)

    def stopped() -> bool:
        with open(f"/proc/{child.proc.pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"

    until(stopped)


@pytest.fixture
def owner(tmp_path):
    made: list[Owner] = []

    def make(name: str = "q", limit: int = 256) -> tuple[str, Owner]:
        d = str(tmp_path / name)
        made.append(Owner(d, limit))
        return d, made[-1]

    yield make
    for child in made:
        try:
            child.proc.send_signal(signal.SIGCONT)
        except ProcessLookupError:
            pass
        child.stop()


# ----------------------------------------------------------------------------- point 1: limits
def test_a_refused_extra_connection_keeps_the_session(owner):
    """The owner's limit is reached (its one other connection belongs to another session): a
    put that needs a second connection waits for the session's own, which a get holds for a
    while; the session and the read it holds stay."""
    d, child = owner(limit=2)
    child.run('q.put(b"held")')
    q = JournaledQueue(d)
    other = Link(d)  # the owner's second and last connection
    try:
        r = q.reader("r")
        held = r.get(timeout=5)
        got: list[object] = []
        waiter = threading.Thread(target=lambda: got.append(_get_or_empty(r, 3.0)))
        waiter.start()
        link = q._route._link
        assert link is not None
        until(lambda: len(link._busy) == 1)
        assert q.put(b"later") == 2  # refused a connection, waited for the get's
        waiter.join(TIMEOUT)
        assert got == [None]
        r.commit(held)  # still open: the session never ended
        assert q.generation == 0
        assert child.run('print("out", r.stats().aborted, r.stats().committed, flush=True)') == ["0 1"]
        assert r.get(timeout=5).data == b"later"
    finally:
        other.kill()
        q.close()


def test_a_call_that_finds_no_connection_in_time_raises_owner_busy_and_sends_nothing(owner, monkeypatch):
    """The same, but the session's own connection stays busy past ``POOL_WAIT``: the put raises
    ``OwnerBusy`` (nothing was sent, nothing stored), and the session goes on."""
    monkeypatch.setattr(connections, "POOL_WAIT", 0.5)
    d, child = owner(limit=2)
    child.run('q.put(b"held")')
    q = JournaledQueue(d)
    other = Link(d)
    try:
        r = q.reader("r")
        held = r.get(timeout=5)
        waiter = threading.Thread(target=lambda: _get_or_empty(r, 5.0))
        waiter.start()
        link = q._route._link
        assert link is not None
        until(lambda: len(link._busy) == 1)
        with pytest.raises(OwnerBusy, match="nothing was sent"):
            q.put(b"not sent")
        waiter.join(TIMEOUT)
        r.commit(held)  # the session and its read are still there
        assert q.generation == 0
        assert child.run('print("out", q.stats().next_id, flush=True)') == ["2"]  # only "held" was put
    finally:
        other.kill()
        q.close()


def _get_or_empty(r: object, timeout: float) -> object:
    try:
        return r.get(timeout=timeout)  # type: ignore[attr-defined]
    except Empty:
        return None


def test_a_process_keeps_at_most_a_few_idle_connections(owner):
    """Twelve threads waiting at once open twelve connections; when they are done, no more
    than ``POOL_IDLE`` stay open (so idle processes cannot fill the owner's limit)."""
    d, child = owner()
    q = JournaledQueue(d)
    try:
        r = q.reader("r")
        start = threading.Barrier(12)

        def wait() -> None:
            start.wait()
            _get_or_empty(r, 1.0)

        threads = [threading.Thread(target=wait) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT)
        link = q._route._link
        assert link is not None and len(link._idle) <= POOL_IDLE and not link._busy

        def connections_at_owner() -> int:
            (line,) = child.run('print("out", sum(c.connections for c in q.stats().clients), flush=True)')
            return int(line)

        until(lambda: connections_at_owner() <= POOL_IDLE)
        assert q.generation == 0
    finally:
        q.close()


# ----------------------------------------------------------------------------- point 2: big replies
def test_a_reply_too_big_to_read_raises_protocol_error_and_is_not_retried(owner, monkeypatch):
    d, child = owner()
    child.run('q.put_many([b"small", b"x" * (2 << 20)])')
    monkeypatch.setattr(proto, "MAX_PAYLOAD", 1 << 20)  # this process reads frames of 1 MiB at most
    q = JournaledQueue(d)
    try:
        r = q.reader("r")
        held = r.get(timeout=5)
        outcome: list[BaseException] = []

        def get() -> None:
            try:
                r.get(timeout=5)
            except BaseException as exc:
                outcome.append(exc)

        t = threading.Thread(target=get, daemon=True)
        t.start()
        t.join(60)
        assert not t.is_alive(), "the get is retrying an unreadable reply"
        assert len(outcome) == 1 and isinstance(outcome[0], proto.ProtocolError), outcome
        assert q.generation == 0 and not q._route._link.dead  # type: ignore[union-attr]
        assert q.readers() == ["r"]  # the session goes on
        r.commit(held)  # with the read it holds
    finally:
        q.close()


# ------------------------------------------------------------------- point 3: settling after a takeover
class _SeenBeforeTheSwitch:
    """The queue as a reader sees it when it read ``generation`` just before another thread's
    change of owner: the generation it reports is the old one, once."""

    def __init__(self, queue: clientqueue.RemoteQueue, old: int) -> None:
        self._queue, self._old = queue, old

    @property
    def generation(self) -> int:
        old, self._old = self._old, None
        return old if old is not None else self._queue.generation

    def __getattr__(self, name: str) -> object:
        return getattr(self._queue, name)


@pytest.mark.parametrize("successor", ["this process", "another process"])
@pytest.mark.parametrize("settle", ["commit", "commit_many", "abort", "release"])
def test_settling_a_read_opened_under_a_dead_owner_raises_owner_lost(owner, tmp_path, successor, settle):
    """Even when the change of owner happens between the reader's check and its request."""
    d, child = owner()
    child.run('q.put_many([b"a", b"b"])')
    q = JournaledQueue(d)
    other: Child | None = None
    try:
        r = q.reader("r")
        items = r.get_many(2, timeout=5)
        child.send("close")
        child.wait_for_line("closed")
        if successor == "another process":
            other = Child(
                "import sys\nfrom journaled import JournaledQueue\nq = JournaledQueue(sys.argv[1])\n"
                "print('owner', q.is_owner, flush=True)\nsys.stdin.readline()\n",
                d,
            )
            other.wait_for_line("owner True")
        assert q.readers() == ["r"]  # this call notices the change of owner
        assert q.is_owner is (successor == "this process")
        r.queue = _SeenBeforeTheSwitch(q, 0)  # type: ignore[assignment]
        with pytest.raises(OwnerLost):
            if settle == "commit_many":
                r.commit_many(items)
            else:
                getattr(r, settle)(items[0])
        r.queue = q
        back = r.get_many(2, timeout=5)
        assert sorted(i.data for i in back) == [b"a", b"b"]  # delivered again
        r.commit_many(back)
    finally:
        q.close()
        if other is not None:
            other.stop()


def test_the_scoped_forms_take_a_read_lost_with_its_owner_for_a_lost_owner(owner, caplog):
    d, child = owner()
    child.run('q.put_many([b"a", b"b"])')
    q = JournaledQueue(d)
    try:
        r = q.reader("r")
        with r.transaction(timeout=5) as item:
            child.send("close")
            child.wait_for_line("closed")
            q.readers()  # this process takes the queue over
        assert item.data == b"a" and q.is_owner
        seen: list[tuple[bytes, str]] = []
        for it in r.iter(timeout=0.5):
            seen.append((it.data, type(it).__name__))
        assert sorted(d for d, _ in seen) == [b"a", b"b"]  # the lost read came back
        assert any("lost with the queue's owner" in rec.getMessage() for rec in caplog.records)
    finally:
        q.close()


# ----------------------------------------------------------------------------- a cancelled aget
@pytest.mark.parametrize("when", ["while it waits", "just as its item came"])
def test_a_cancelled_aget_in_a_client_gives_its_item_back(owner, when):
    """A cancelled ``aget`` leaves no read open: the item is the next one delivered, uncounted
    (also when the cancel comes after its thread posted the item, before the task resumed)."""
    d, child = owner()
    q = JournaledQueue(d)
    try:
        r = q.reader("r")

        async def cancelled() -> None:
            task = asyncio.ensure_future(r.aget(30))
            if when == "while it waits":
                await asyncio.sleep(0.05)
                task.cancel()
            else:
                loop = asyncio.get_running_loop()
                post = loop.call_soon_threadsafe

                def post_then_cancel(callback: Callable[..., object], *args: object) -> object:
                    # the cancel runs right after the post, before the task could resume
                    return post(lambda: (callback(*args), task.cancel()))

                loop.call_soon_threadsafe = post_then_cancel  # type: ignore[method-assign]
                child.run('q.put(b"only")')
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(cancelled())
        if when == "while it waits":
            child.run('q.put(b"only")')
        again = r.get(timeout=5)
        assert (again.data, again.error_count) == (b"only", 0)
        r.commit(again)
        (line,) = child.run('print("out", r.stats().open_reads, len(r), flush=True)')
        assert line == "0 0"
    finally:
        q.close()


# ----------------------------------------------------------------------------- point 5: whom it talks to
@pytest.mark.parametrize("how", ["symlink", "hard link"])
def test_a_socket_planted_from_another_queue_is_refused(owner, how):
    da, a = owner("a")
    db, b = owner("b")
    planted = os.path.join(db, proto.SOCKET_NAME)
    os.unlink(planted)  # b goes on listening on its unlinked socket
    target = os.path.join(da, proto.SOCKET_NAME)
    if how == "symlink":
        os.symlink(target, planted)
    else:
        os.link(target, planted)
    with pytest.raises(UnsafeDirectory):
        JournaledQueue(db).put(b"meant for b")
    assert a.run('print("out", q.stats().put, flush=True)') == ["0"]


def test_a_regular_file_named_like_the_socket_is_refused_and_left_alone(tmp_path, owner):
    d = str(tmp_path / "q")
    os.makedirs(d, mode=0o700)
    planted = os.path.join(d, proto.SOCKET_NAME)
    with open(planted, "w") as f:
        f.write("not a socket")
    _, child = owner()  # it owns the queue, and does not serve it
    with pytest.raises(UnsafeDirectory, match="not a socket"):
        JournaledQueue(d)
    with open(planted) as f:
        assert f.read() == "not a socket"


def test_a_queue_opened_through_a_symlinked_directory_path_is_served(owner, tmp_path):
    """The path a user names may be a link to the queue's directory; names inside it may not."""
    d, child = owner()
    alias = str(tmp_path / "alias")
    os.symlink(d, alias)
    q = JournaledQueue(alias)
    try:
        assert not q.is_owner and q.put(b"through the alias") == 1
    finally:
        q.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_socket_file_of_another_user_is_refused(owner):
    d, child = owner()
    os.chown(os.path.join(d, proto.SOCKET_NAME), 4242, -1, follow_symlinks=False)
    with pytest.raises(UnsafeDirectory, match="uid 4242"):
        JournaledQueue(d)


# ----------------------------------------------------------------------------- point 6: fork
def test_a_client_queue_used_after_a_bare_fork_raises_queue_forked(owner):
    d, child = owner()
    child.run('q.put(b"held")')
    q = JournaledQueue(d)
    try:
        r = q.reader("r")
        held = r.get(timeout=5)
        pid = os.fork()
        if pid == 0:  # the child: never the parent's session, never a new one
            code = 3
            try:
                q.put(b"from the child")
                code = 1
            except QueueForked:
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        r.commit(held)  # the parent's session is untouched
        assert q.generation == 0
        assert child.run('print("out", q.stats().put, flush=True)') == ["1"]
    finally:
        q.close()


# ----------------------------------------------------------------------------- point 7: deadlines
def test_opening_a_queue_whose_owner_is_stopped_fails_within_the_connect_deadline(owner, monkeypatch):
    d, child = owner()
    monkeypatch.setattr(routing, "CONNECT_TIMEOUT", 1.0)
    stop(child)
    outcome: list[BaseException | object] = []

    def open_it() -> None:
        try:
            outcome.append(JournaledQueue(d))
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=open_it, daemon=True)
    t.start()
    t.join(60)
    child.proc.send_signal(signal.SIGCONT)
    t.join(TIMEOUT)
    (result,) = outcome
    assert isinstance(result, QueueLocked), result
    assert "hello deadline" in str(result.__cause__)
    assert child.run('print("out", q.readers(), flush=True)') == ["['r']"]


@pytest.mark.parametrize("call", ["put", "get", "get without a timeout"])
def test_a_call_to_an_owner_stopped_meanwhile_raises_owner_lost_naming_the_deadline(owner, monkeypatch, call):
    d, child = owner()
    q = JournaledQueue(d)
    try:
        r = q.reader("r")
        monkeypatch.setattr(connections, "REPLY_MARGIN", 1.0)
        monkeypatch.setattr(routing, "CONNECT_TIMEOUT", 1.0)
        monkeypatch.setattr(clientreader, "WAIT_SLICE", 0.5)
        stop(child)
        outcome: list[BaseException] = []

        def use() -> None:
            try:
                if call == "put":
                    q.put(b"x")
                else:
                    r.get(timeout=2.0 if call == "get" else None)
            except BaseException as exc:
                outcome.append(exc)

        t = threading.Thread(target=use, daemon=True)
        t.start()
        t.join(60)
        child.proc.send_signal(signal.SIGCONT)
        t.join(TIMEOUT)
        (lost,) = outcome
        assert isinstance(lost, OwnerLost), lost
        assert lost.outcome_unknown is (call == "put")
        assert "deadline" in str(lost) or "deadline" in str(lost.__cause__), lost
        monkeypatch.setattr(routing, "CONNECT_TIMEOUT", 30.0)
        assert q.readers() == ["r"]  # the owner answers again: the next call reconnects
    finally:
        q.close()


def test_a_get_without_a_timeout_asks_the_owner_in_slices(owner, monkeypatch):
    """Each request of a blocking get asks for at most ``WAIT_SLICE`` seconds of waiting, so its
    reply has a deadline; the caller still waits until an item comes."""
    d, child = owner()
    q = JournaledQueue(d)
    try:
        r = q.reader("r")
        monkeypatch.setattr(clientreader, "WAIT_SLICE", 0.2)
        asked: list[object] = []
        real = q.call

        def spy(header, payload=b"", **kw):  # type: ignore[no-untyped-def]
            asked.append(header.get("timeout"))
            return real(header, payload, **kw)

        monkeypatch.setattr(q, "call", spy)
        got: list[object] = []
        t = threading.Thread(target=lambda: got.append(r.get()))
        t.start()
        until(lambda: len(asked) >= 3)
        child.run('q.put(b"late")')
        t.join(TIMEOUT)
        assert [i.data for i in got] == [b"late"]  # type: ignore[attr-defined]
        assert all(isinstance(a, float) and a <= 0.2 for a in asked), asked
    finally:
        q.close()
