"""Type stub of the compiled hot path (journaled/format/_speedups.c); see journaled.format.speedups."""

from collections.abc import Callable, Sequence
from typing import Any

crc: str

def configure(
    put_type: type,
    field_names: tuple[str, ...],
    encode_puts: Callable[..., list[int]],
    decode_many: Callable[..., Any],
    decode_one: Callable[..., Any],
    damage_type: type,
    max_body: int,
) -> None: ...
def encode_puts(
    salt: int,
    offset: int,
    first_id: int,
    add_ms: int,
    expire_ms: int,
    payloads: Sequence[bytes],
    out: bytearray,
) -> list[int]: ...
def decode_many(
    buf: bytes | bytearray | memoryview,
    base_offset: int,
    salt: int,
    pos: int = 0,
    max_body: int = ...,
    limit: int | None = None,
) -> tuple[list[Any], int, Any]: ...
def configure_columns(
    decode_columns: Callable[..., tuple[int, int | None, int]], max_batch_bytes: int
) -> None: ...
def decode_columns(
    buf: bytes,
    base_offset: int,
    salt: int,
    pos: int,
    lo: int,
    hi: int,
    end_offset: int,
    max_rows: int,
    max_bytes: int,
    out: list[bytearray],
) -> tuple[int, int | None, int]: ...
def configure_items(
    item_type: type,
    field_names: tuple[str, ...],
    new_items: Callable[..., list[Any]],
    new_item: Callable[..., Any],
) -> None: ...
def new_item(
    id: int, data: bytes, add_time: float, expire_at: float | None = None, error_count: int = 0
) -> Any: ...
def new_items(
    first_id: int, payloads: list[bytes], add_time: float, expire_at: float | None
) -> list[Any]: ...
def configure_refill(items_from_puts: Callable[..., tuple[list[Any], int, bool]]) -> None: ...
def items_from_puts(recs: Any, errors: Any, want: int, overhead: int) -> tuple[list[Any], int, bool]: ...
