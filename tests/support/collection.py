"""Python code run by the garbage collector in the middle of a compiled call: how the twin tests
check that the C codec holds its references across Python code (a collection can run any
``__del__`` or ``gc.callbacks`` entry at any allocation)."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any


def call_amid_collection(action: Callable[[], None], nth: int, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, with ``action`` run once by a ``gc.callbacks`` entry at the collection that
    starts at ``fn``'s ``nth + 1``-th allocation of a container: the call starts right after a full
    collection with the threshold at ``nth`` (on Python 3.11 a collection starts inside the
    allocation that passes the threshold; later versions defer it, and the call runs undisturbed).
    Armed only after that full collection, so the action never runs before the call."""
    armed: list[bool] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and armed:
            armed.clear()
            action()

    old = gc.get_threshold()
    gc.callbacks.append(callback)
    try:
        gc.collect()
        gc.set_threshold(nth)
        armed.append(True)
        return fn(*args)
    finally:
        gc.set_threshold(*old)
        gc.callbacks.remove(callback)
