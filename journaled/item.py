"""The value handed to consumers."""

from __future__ import annotations

import attrs


@attrs.frozen(slots=True)
class Item:
    """One delivered item (an open read until committed or aborted).

    Attributes:
        id: 64-bit id, strictly increasing in put order within a queue.
        data: the payload, exactly the bytes that were put.
        add_time: when it was put, float seconds since the epoch (ms precision).
        expire_at: when it expires (float epoch seconds), or None.
        error_count: how many times it was aborted on this reader.
    """

    id: int
    data: bytes
    add_time: float
    expire_at: float | None = None
    error_count: int = 0
