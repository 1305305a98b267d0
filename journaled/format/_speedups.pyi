"""Type stub of the compiled twins (journaled/format/_speedups.c); only journaled.format.speedups
imports the module, and the references with these signatures are in journaled.format.fallback."""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

#: What the switch checks first (journaled.format.speedups.ABI_VERSION).
ABI_VERSION: int
#: How CRC32C is computed: ``"sse4.2"`` or ``"table"``.
crc: str

def configure(
    *,
    constants: dict[str, int],
    put_type: type,
    put_fields: tuple[str, ...],
    putx_type: type,
    putx_fields: tuple[str, ...],
    meta_type: type,
    meta_fields: tuple[str, ...],
    no_headers: Mapping[str, bytes],
    damage_type: type,
    encode_puts: Callable[..., list[int]],
    decode_many: Callable[..., Any],
    decode_one: Callable[..., Any],
    decode_columns: Callable[..., tuple[int, int | None, int]],
    walk_puts: Callable[..., tuple[list[Any], int, int, int, bool, int, Any]] | None = None,
    encode_putx: Callable[..., None] | None = None,
) -> None: ...
def configure_items(
    *,
    item_type: type,
    item_fields: tuple[str, ...],
    new_item: Callable[..., Any],
    new_items: Callable[..., list[Any]],
    items_from_puts: Callable[..., tuple[list[Any], int, bool]],
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
def encode_putx(
    salt: int,
    offset: int,
    item_id: int,
    add_ms: int,
    expire_ms: int,
    meta: bytes,
    payload: bytes,
    out: bytearray,
) -> None: ...
def decode_many(
    buf: bytes | bytearray | memoryview,
    base_offset: int,
    salt: int,
    pos: int = 0,
    max_body: int = ...,
    limit: int | None = None,
) -> tuple[list[Any], int, Any]: ...
def walk_puts(
    buf: bytes | bytearray,
    base_offset: int,
    salt: int,
    pos: int,
    expected: int,
    max_items: int,
    max_bytes: int,
    nbytes: int,
    first_free: bool,
) -> tuple[list[Any], int, int, int, bool, int, Any]: ...
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
def new_item(
    id: int, data: bytes, add_time: float, expire_at: float | None = None, error_count: int = 0
) -> Any: ...
def new_items(
    first_id: int, payloads: list[bytes], add_time: float, expire_at: float | None
) -> list[Any]: ...
def items_from_puts(
    recs: Sequence[Any], errors: Mapping[int, int], want: int, overhead: int
) -> tuple[list[Any], int, bool]: ...
