"""What bounds the cost of scrapes of ``journaled serve``'s status page and metrics to the owner
(docs/design.md, "The cost of a scrape").

* :class:`SharedRender`: one render at a time, shared by every request that comes while it runs,
  and its answer reused for a while after, so that however many scrapers ask, and however often,
  rendering takes at most about :data:`RENDER_SHARE` of the owner's time.
* :func:`stats_dict`: ``attrs.asdict`` of a queue's stats, reader by reader with turns between.
* :func:`dumps_in_turns`: ``json.dumps`` of a large answer, in pieces with turns for the other
  threads between them (``json.dumps`` is C: it keeps the GIL for the whole answer, 30 ms and
  more for a queue of 3,000 readers).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs

from journaled.stats import QueueStats, Turns

#: the share of the owner's time rendering may take under nonstop scraping: an answer is reused
#: for (1 / share - 1) times as long as it took to render
RENDER_SHARE = 0.1
#: and for at least this many seconds (a render of a small queue takes a millisecond)
MIN_REUSE = 0.25


class SharedRender:
    """``get()`` answers ``render()``'s latest result, rendering again only when that is older
    than its reuse time: :data:`MIN_REUSE`, or (1 / :data:`RENDER_SHARE` - 1) times as long as
    that render took, whichever is longer.  A caller that comes while a render runs waits for it
    and gets its result (concurrent scrapes trigger one render); a render that raises is not
    kept (the callers waiting for it render again, one at a time).

    ``renders`` counts the renders done; ``clock`` is for tests."""

    def __init__(
        self,
        render: Callable[[], bytes],
        share: float = RENDER_SHARE,
        min_reuse: float = MIN_REUSE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], not {share!r}")
        self._render, self._share, self._min_reuse, self._clock = render, share, min_reuse, clock
        self._cond = threading.Condition(threading.Lock())
        self._answer: bytes | None = None
        self._until = 0.0  # the clock's time until which _answer is reused
        self._rendering = False
        self.renders = 0

    @property
    def rendering(self) -> bool:
        """A render is under way (a benchmark waits for none to be before it measures)."""
        with self._cond:
            return self._rendering

    def expire(self) -> None:
        """The answer kept is not reused: the next :meth:`get` renders again."""
        with self._cond:
            self._until = 0.0

    def get(self) -> bytes:
        """The latest render, or a new one if it is too old (then callers meanwhile share it)."""
        with self._cond:
            while True:
                if self._answer is not None and self._clock() < self._until:
                    return self._answer
                if not self._rendering:
                    break
                self._cond.wait()
            self._rendering = True
        start = self._clock()
        try:
            answer = self._render()
        except BaseException:
            with self._cond:  # not kept: a caller waiting renders again
                self._rendering = False
                self._cond.notify_all()
            raise
        took = self._clock() - start
        with self._cond:
            self._rendering = False
            self._answer = answer
            self._until = self._clock() + max(self._min_reuse, took * (1 / self._share - 1))
            self.renders += 1
            self._cond.notify_all()
        return answer


def stats_dict(st: QueueStats) -> dict[str, Any]:
    """``attrs.asdict(st, recurse=True)``, the same dict, made reader by reader with turns for
    the other threads between them (the asdict of 3,000 readers is 50 ms of Python)."""
    turns = Turns()
    readers = []
    for r in st.readers:
        readers.append(attrs.asdict(r, recurse=True))
        turns.tick()
    rest = attrs.asdict(st, recurse=True, filter=lambda field, _value: field.name != "readers")
    rest["readers"] = tuple(readers)
    return {name: rest[name] for name in attrs.fields_dict(QueueStats)}  # in the fields' order


def dumps_in_turns(obj: Any, default: Callable[[Any], Any] | None = None) -> str:
    """``json.dumps(obj, default=default)``, the same text, made in pieces with turns for the
    other threads (:class:`~journaled.stats.Turns`) between them: a list, tuple or dict (of
    ``str`` keys) is written element by element, each run of up to :data:`RUN` elements that are
    scalars or small flat containers (a reader's ``[backlog, committed]``) by one ``json.dumps``."""
    out: list[str] = []
    _encode(obj, out, default, Turns())
    return "".join(out)


#: elements written by one ``json.dumps`` call at most
RUN = 64


def _flat(value: Any) -> bool:
    """A scalar, or a container of at most :data:`RUN` scalars."""
    if isinstance(value, dict):
        values: Any = value.values()
    elif isinstance(value, (list, tuple)):
        values = value
    else:
        return True
    return len(value) <= RUN and not any(isinstance(v, (dict, list, tuple)) for v in values)


def _encode(obj: Any, out: list[str], default: Callable[[Any], Any] | None, turns: Turns) -> None:
    is_dict = isinstance(obj, dict)
    if _flat(obj) or (is_dict and not all(type(k) is str for k in obj)):
        out.append(json.dumps(obj, default=default))
        turns.tick()
        return
    items: Any = obj.items() if is_dict else obj
    out.append("{" if is_dict else "[")
    run: list[Any] = []
    first = True

    def flush() -> None:
        nonlocal first
        if run:
            out.append(
                ("" if first else ", ") + json.dumps(dict(run) if is_dict else run, default=default)[1:-1]
            )
            first = False
            run.clear()
            turns.tick()

    for item in items:
        if _flat(item[1] if is_dict else item):
            run.append(item)
            if len(run) >= RUN:
                flush()
            continue
        flush()
        if not first:
            out.append(", ")
        first = False
        if is_dict:
            out.append(json.dumps(item[0]) + ": ")
            _encode(item[1], out, default, turns)
        else:
            _encode(item, out, default, turns)
    flush()
    out.append("}" if is_dict else "]")


__all__ = ["SharedRender", "dumps_in_turns", "stats_dict"]
