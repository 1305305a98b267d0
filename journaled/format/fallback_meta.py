"""The pure-Python references of the compiled builders of a single put's metadata objects
(``_speedups.new_meta`` and ``new_meta_item``), beside format/fallback.py's other references (kept
apart only for that module's size): ``metadata.Meta`` and journaled.item's ``MetaItem`` built from
their slot descriptors.  format/speedups.py picks these or the compiled twins
(:func:`journaled.format.speedups.meta_twins`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import attrs

from journaled.format.fallback import ITEM_FIELDS, T, T_co
from journaled.format.metadata import Meta

#: The fields of journaled.item.MetaItem, in order: Item's, then its metadata.
META_ITEM_FIELDS = (*ITEM_FIELDS, "stored")


class NewMeta(Protocol):
    """``new_meta(not_before_ms, producer, sequence, key, headers)``."""

    def __call__(
        self,
        not_before_ms: int,
        producer: int,
        sequence: int,
        key: bytes | None,
        headers: Mapping[str, bytes],
    ) -> Meta: ...


class NewMetaItem(Protocol[T_co]):
    """``new_meta_item(id, data, add_time, expire_at, error_count, stored)``."""

    def __call__(
        self, id: int, data: bytes, add_time: float, expire_at: float | None, error_count: int, stored: Meta
    ) -> T_co: ...


def meta_references(meta_item_type: type[T]) -> tuple[NewMeta, NewMetaItem[T]]:
    """The references ``new_meta`` (``metadata.Meta(...)``) and ``new_meta_item`` (``meta_item_type(...)``:
    journaled.item.MetaItem, a frozen attrs class with slots and the fields :data:`META_ITEM_FIELDS`),
    built faster, for a single put with a key or headers.

    Raises ``TypeError`` if either class has other fields: the builders set exactly these.
    """
    meta_fields = tuple(a.name for a in attrs.fields(Meta))
    if meta_fields != ("not_before_ms", "producer", "sequence", "key", "headers") or (
        tuple(a.name for a in attrs.fields(meta_item_type)) != META_ITEM_FIELDS
    ):
        raise TypeError("Meta or MetaItem has fields other than the metadata twins set: update them")
    # perf: as item_references -- the slot descriptors, not attrs' __init__ (no validators,
    # converters or __attrs_post_init__ to skip)
    new = object.__new__
    m = vars(Meta)
    set_nb, set_producer, set_sequence = (
        m["not_before_ms"].__set__,
        m["producer"].__set__,
        m["sequence"].__set__,
    )
    set_key, set_headers = m["key"].__set__, m["headers"].__set__
    base = vars(meta_item_type.__mro__[1])
    set_id, set_data, set_add_time = base["id"].__set__, base["data"].__set__, base["add_time"].__set__
    set_expire_at, set_error_count = base["expire_at"].__set__, base["error_count"].__set__
    set_stored = vars(meta_item_type)["stored"].__set__

    def new_meta(
        not_before_ms: int, producer: int, sequence: int, key: bytes | None, headers: Mapping[str, bytes]
    ) -> Meta:
        """``Meta(not_before_ms, producer, sequence, key, headers)``, built faster.

        compiled twin: _speedups.c, section new_meta, new_meta_item.
        """
        meta: Meta = new(Meta)
        set_nb(meta, not_before_ms)
        set_producer(meta, producer)
        set_sequence(meta, sequence)
        set_key(meta, key)
        set_headers(meta, headers)
        return meta

    def new_meta_item(
        id: int, data: bytes, add_time: float, expire_at: float | None, error_count: int, stored: Meta
    ) -> T:
        """``MetaItem(id, data, add_time, expire_at, error_count, stored)``, built faster.

        compiled twin: _speedups.c, section new_meta, new_meta_item.
        """
        item: T = new(meta_item_type)
        set_id(item, id)
        set_data(item, data)
        set_add_time(item, add_time)
        set_expire_at(item, expire_at)
        set_error_count(item, error_count)
        set_stored(item, stored)
        return item

    return new_meta, new_meta_item
