"""Open objects and the life of the process: closed at interpreter exit, dropped in forked children.

A program that ends without ``close()`` must lose nothing it put, and a child forked after a
queue was opened must neither keep the parent's directory lock nor write through the parent's
files.  Objects that own such things register here with two hooks:

* ``at_exit(obj)`` runs from an :mod:`atexit` handler, most recently registered first (a queue
  opened later, whose sinks may be an earlier queue, closes first).  Plain ``atexit`` runs after
  the interpreter has joined every non-daemon thread, so their last puts are in, and before
  daemon threads (the queues' own background threads) are frozen, so a close can still stop
  and join them;
* ``in_child(obj)`` runs in the child right after ``fork()`` (``os.register_at_fork``), on the
  only thread the child has.  It must not write and must not wait for a lock: any other thread
  of the parent may have held it at the fork, and that thread does not exist in the child.

Registration holds only weak references, so it never keeps an abandoned object alive; an
object leaves the registry when it closes (or is collected).  :func:`weakly` builds callbacks
for background threads on the same principle.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

log = logging.getLogger("journaled")

T = TypeVar("T")
R = TypeVar("R")

Hook = Callable[[Any], None]

# weak reference to obj -> (at_exit, in_child); an entry leaves when its object dies.  No lock:
# a garbage collection may run on any thread at any allocation and close a collected queue,
# which untracks it; with a lock held there, that would deadlock.  Assignments, pops and
# ``list(d.items())`` are atomic under the GIL.
_tracked: dict[weakref.ref[Any], tuple[Hook | None, Hook | None]] = {}
_local = threading.local()


def _gone(ref: weakref.ref[Any]) -> None:
    _tracked.pop(ref, None)


def track(obj: T, at_exit: Callable[[T], None] | None, in_child: Callable[[T], None] | None) -> None:
    """Call ``at_exit(obj)`` at interpreter exit and ``in_child(obj)`` in a forked child, as
    long as ``obj`` is alive and not :func:`untrack`-ed.  ``obj`` must compare by identity."""
    _tracked[weakref.ref(obj, _gone)] = (at_exit, in_child)


def untrack(obj: object) -> None:
    """Forget ``obj`` (it closed).  Unknown objects are ignored."""
    _tracked.pop(weakref.ref(obj), None)  # references to a live object compare as the object


def _live(exiting: bool) -> list[tuple[Any, Hook]]:
    out = []
    for ref, (at_exit, in_child) in list(_tracked.items()):
        obj, hook = ref(), at_exit if exiting else in_child
        if obj is not None and hook is not None:
            out.append((obj, hook))
    return out


def _at_exit() -> None:
    for obj, hook in reversed(_live(True)):
        try:
            hook(obj)
        except Exception:
            log.exception("closing %r at interpreter exit failed", obj)


def _in_child() -> None:
    for obj, hook in _live(False):
        try:
            hook(obj)
        except Exception:
            log.exception("dropping %r in a forked child failed", obj)


_forked: weakref.WeakSet[Any] = weakref.WeakSet()  # objects a fork hook made unusable here


def mark_forked(obj: object) -> None:
    """``obj`` belongs to the process this one was forked from (called by fork hooks)."""
    _forked.add(obj)


def is_forked(obj: object) -> bool:
    """Was ``obj`` marked by :func:`mark_forked` in this process?"""
    return obj in _forked


def mark_background() -> None:
    """Called by the library's own threads when they start (see :func:`on_background_thread`)."""
    _local.background = True


def on_background_thread() -> bool:
    """Is the caller one of the library's background threads?  Those hold queue locks without
    holding the queue: a queue collected there must be closed on another thread."""
    return bool(getattr(_local, "background", False))


def weakly(obj: T, fn: Callable[[T], R], default: R) -> Callable[[], R]:
    """A callable returning ``fn(obj)``, or ``default`` once ``obj`` is gone, that does not keep
    ``obj`` alive: a background thread holding it must not make an abandoned queue immortal."""
    ref = weakref.ref(obj)

    def call() -> R:
        target = ref()
        return default if target is None else fn(target)

    return call


atexit.register(_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_child)
