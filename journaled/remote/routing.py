"""The way from a client queue to its owner, and failover (remote/clientqueue.py is the queue's API).

A :class:`Route` holds either a connection to the owning process (remote/connections.py's
``Link``) or, once this process has taken the directory over, the queue it owns, and carries
each request out on whichever it holds: over the socket, or here by the owner's own request
handlers (remote/handlers.py).  That choice is made in one place, :meth:`Route.call`.

**Failover.**  When the owner closes or dies, the first call that notices (any thread) makes this
process try to own the directory: whoever wins the lock recovers the queue and serves it, the
others connect to it.  What a call in flight then does (made again, or :class:`OwnerLost`) is
said in remote/clientqueue.py's docstring and :meth:`Route.call`'s.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, cast

from journaled.errors import OwnerLost, QueueForked, QueueLocked, UnsafeDirectory
from journaled.remote import handlers
from journaled.remote import protocol as proto
from journaled.remote.connections import SETTLE_OPS, Link, closed_error
from journaled.remote.contract import ServedQueue

#: seconds an open, or a call after the owner went away, keeps trying to reach or become the
#: owner (each connection's connect and hello must fit in what is left of it)
CONNECT_TIMEOUT = 10.0
RETRY_PAUSE = 0.01  # between attempts while a new owner recovers and starts serving
#: seconds a put whose owner died before answering is made again on the next owners
PUT_RETRY = 60.0


class OwnedQueue(ServedQueue, Protocol):
    """The queue this process owns after taking the directory over (a ``JournaledQueue``): it is
    served the owner's contract, and closed with the route."""

    def close(self) -> None:
        """Close the queue as its owner does, releasing the directory."""
        ...


def left(deadline: float) -> float:
    """Seconds until ``deadline`` (a little at least: a connection needs a moment)."""
    return max(deadline - time.monotonic(), 0.05)


class Route:
    """Where the requests of the client queue of directory ``path`` are carried out: by the
    owner over ``link``, or here once this process owns the directory (``open_owner`` takes it)."""

    def __init__(self, path: str, link: Link, open_owner: Callable[[], OwnedQueue]) -> None:
        self.path = path
        # the way to the owner: changed together under _state (a leaf), so that a call never
        # pairs one owner's generation with another's connection
        self._state = threading.Lock()
        self._link: Link | None = link
        self._local: OwnedQueue | None = None  # the JournaledQueue this process owns after a failover
        self._here = handlers.Session(os.getpid())  # this process's open reads on _local
        self._generation = 0
        self._here_lock = threading.Lock()  # a leaf, as the server's: guards here.reads
        self._open_owner = open_owner
        self._switch = threading.Lock()  # one failover at a time; guards closed
        self._pid = os.getpid()
        self.closed = False
        self._retried_lock = threading.Lock()  # a leaf: guards puts_retried
        #: how many puts were made again on a next owner after theirs died unanswered
        self.puts_retried = 0

    @property
    def is_owner(self) -> bool:
        """True when this process owns the directory (it took over after the owner left)."""
        return self._local is not None

    @property
    def owner_pid(self) -> int:
        """The pid of the process serving the queue now."""
        with self._state:
            link, local = self._link, self._local
        return os.getpid() if local is not None else cast(Link, link).owner_pid

    @property
    def generation(self) -> int:
        """How many times the route changed owner: a read opened under another is gone."""
        return self._generation

    def reconnect(self, generation: int) -> None:
        """The owner of ``generation`` is gone: own the directory, or connect to who does."""
        with self._switch:
            if self._generation != generation or self.closed:
                return
            deadline = time.monotonic() + CONNECT_TIMEOUT
            while True:
                try:
                    owned = self._open_owner()
                    here = handlers.Session(os.getpid())
                    with self._state:
                        self._local, self._link, self._here = owned, None, here
                        self._generation += 1
                    return
                except (OwnerLost, QueueLocked):
                    pass
                try:
                    link = Link(self.path, left(deadline))
                    with self._state:
                        self._link = link
                        self._generation += 1
                    return
                except UnsafeDirectory:
                    raise
                except (OSError, proto.ProtocolError) as exc:
                    if time.monotonic() >= deadline:
                        raise OwnerLost(
                            f"no owner of {self.path} could be reached or become within "
                            f"{CONNECT_TIMEOUT:g} s: {exc}"
                        ) from exc
                    time.sleep(RETRY_PAUSE)

    def call(
        self,
        header: dict[str, Any],
        payload: bytes = b"",
        *,
        is_put: bool = False,
        wait: float = 0.0,
        opened: int | None = None,
    ) -> tuple[dict[str, Any], bytes, int]:
        """One request to the owner: its reply, payload and the route's generation.

        The one place that chooses where a request is carried out: over the socket by the
        owner, or, once this process is the owner, here, by the same handlers the owner's server
        runs (the same reply, the same errors).  After a loss that left nothing done the
        request is made again on the next owner.  ``wait`` is how long the owner may take on
        purpose (a blocking get's timeout); ``opened``, for a request settling reads, is the
        generation they were opened under: under another, :class:`OwnerLost` and nothing sent.
        A put carrying its producer's tag that reached an owner which died before answering is
        made again, with the same tag, on the next owner, for up to :data:`PUT_RETRY` seconds."""
        retry_until = 0.0
        while True:
            if self.closed:
                raise closed_error(self.path)
            if os.getpid() != self._pid:
                raise QueueForked(
                    f"queue {self.path!r} was opened by the process this one was forked from: open it here"
                )
            with self._state:
                generation, link, local, here = self._generation, self._link, self._local, self._here
            if opened is not None and opened != generation:
                raise OwnerLost(
                    f"the reads were opened under an owner of {self.path} that is gone; they are "
                    f"delivered again"
                )
            if local is not None:
                reply, data = handlers.carry_out_here(local, here, self._here_lock, header, payload)
                return reply, data, generation
            try:
                reply, data = cast(Link, link).call(header, payload, is_put=is_put, wait=wait)
                return reply, data, generation
            except OwnerLost as exc:
                if not exc.outcome_unknown and header["op"] not in SETTLE_OPS:
                    self.reconnect(generation)
                    continue  # nothing was done: again, on the next owner
                if is_put and "tag" in header and not isinstance(exc.__cause__, TimeoutError):
                    # the owner died (its connection dropped): the next owner stores only what
                    # the dead one had not (exactly once).  One that merely did not answer in
                    # time is alive and holds the queue: no next owner can take it over.
                    retry_until = retry_until or time.monotonic() + PUT_RETRY
                    self.put_again(generation, retry_until, exc)
                    with self._retried_lock:
                        self.puts_retried += 1
                    continue
                try:
                    self.reconnect(generation)
                except OwnerLost:
                    pass  # no owner yet: the next call tries again; this one reports its own loss
                if exc.outcome_unknown:
                    raise
                lost = OwnerLost(
                    f"the owner of {self.path} went away before it carried out a "
                    f"{header['op']}: the reads are not open any more, they are delivered again"
                )
                raise lost from exc

    def put_again(self, generation: int, retry_until: float, lost: OwnerLost) -> None:
        """Find the next owner for a tagged put ``lost`` left unanswered, or raise ``lost`` (its
        outcome unknown) once ``retry_until`` has passed without one."""
        while True:
            try:
                self.reconnect(generation)
                return
            except OwnerLost as exc:
                if time.monotonic() >= retry_until:
                    given_up = OwnerLost(
                        f"the owner of {self.path} went away during a put and no next owner "
                        f"answered within {PUT_RETRY:g} s: the put may or may not be stored ({exc})"
                    )
                    given_up.outcome_unknown = True
                    raise given_up from lost
                time.sleep(RETRY_PAUSE)

    def close(self) -> None:
        """End the route: the connection is dropped (the owner aborts this process's open reads);
        a queue this process came to own is closed as an owner closes it."""
        with self._switch:
            self.closed = True
            link, local = self._link, self._local
        if link is not None:
            link.kill()
        if local is not None:
            local.close()
