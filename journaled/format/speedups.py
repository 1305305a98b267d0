"""The one switch: which implementation of the hot loops runs, the compiled twins or their references.

``journaled.format._speedups`` (built from ``journaled/format/_speedups.c`` by ``pip install``,
where a C compiler exists) holds the compiled twins of the loops whose pure-Python references sit
together in format/fallback.py.  Both write byte-identical journals and decode identically, error
for error.  This module alone imports ``_speedups`` and decides, once, at import:

* ``JOURNALED_PURE_PYTHON=1`` in the environment (before journaled is imported) selects the
  references;
* else the extension is used if it is built, its ``ABI_VERSION`` is :data:`ABI_VERSION`, and its
  ``configure`` accepts format/record.py's layout constants (it compares them with its own named
  constants and refuses on any difference); otherwise the references run and :func:`describe` says
  why.

Callers take :data:`encode_puts`, :data:`encode_putx`, :data:`decode_many`, :data:`walk_puts`,
:data:`decode_columns`, :data:`unit_records` from here, and journaled.item takes the item builders from
:func:`item_twins` (it passes its ``Item`` class in: format/ cannot import it).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final, TypeVar

import attrs
from attrs import AttrsInstance

from journaled.format import columns, fallback, metadata, record
from journaled.format.fallback import ItemsFromPuts, NewItem, NewItems
from journaled.format.fallback_meta import NewMeta, NewMetaItem, meta_references

#: The environment variable that, set to anything but ``""`` or ``"0"``, forces pure Python.
ENV_VAR: Final = "JOURNALED_PURE_PYTHON"

#: The ``ABI_VERSION`` of ``_speedups.c`` this code drives: ``configure``'s and
#: ``configure_items``' arguments and the twins' contracts.  A build with another number is stale.
ABI_VERSION: Final = 11

T = TypeVar("T", bound=AttrsInstance)


def layout() -> dict[str, int]:
    """The format constants the compiled twin was written against, by their names in record.py
    (and columns.py): what ``_speedups.configure`` checks against its own ``#define``s."""
    return {
        "RECORD_CRC_AT": record.RECORD_CRC_AT,
        "RECORD_LENGTH_AT": record.RECORD_LENGTH_AT,
        "RECORD_TYPE_AT": record.RECORD_TYPE_AT,
        "RECORD_HEADER_SIZE": record.RECORD_HEADER_SIZE,
        "PUT_ID_AT": record.PUT_ID_AT,
        "PUT_ADD_MS_AT": record.PUT_ADD_MS_AT,
        "PUT_EXPIRE_MS_AT": record.PUT_EXPIRE_MS_AT,
        "PUT_FIELDS_SIZE": record.PUT_FIELDS_SIZE,
        "PUT_OVERHEAD": record.PUT_OVERHEAD,
        "TYPE_PUT": record.TYPE_PUT,
        "TYPE_PUTX": record.TYPE_PUTX,
        "PUTX_FIELDS_SIZE": record.PUTX_FIELDS_SIZE,
        "PUTX_NOT_BEFORE_AT": record.PUTX_NOT_BEFORE_AT,
        "PUTX_PRODUCER_AT": record.PUTX_PRODUCER_AT,
        "PUTX_SEQUENCE_AT": record.PUTX_SEQUENCE_AT,
        "PUTX_KEY_LEN_AT": record.PUTX_KEY_LEN_AT,
        "PUTX_HEADER_COUNT_AT": record.PUTX_HEADER_COUNT_AT,
        "PUTX_HEADERS_LEN_AT": record.PUTX_HEADERS_LEN_AT,
        "PUTX_OVERHEAD": record.PUTX_OVERHEAD,
        "MAX_BODY": record.MAX_BODY,
        "MAX_BATCH_BYTES": columns.MAX_BATCH_BYTES,
    }


def configure_arguments() -> dict[str, Any]:
    """The keyword arguments :func:`adopt` gives ``_speedups.configure``: the layout, the classes
    the twins build (``Put``, and ``PutX`` with its ``Meta`` and the shared empty headers for a
    PUTX carrying only a producer's tag) with their field names, and the references."""
    return {
        "constants": layout(),
        "put_type": record.Put,
        "put_fields": tuple(a.name for a in attrs.fields(record.Put)),
        "putx_type": record.PutX,
        "putx_fields": tuple(a.name for a in attrs.fields(record.PutX)),
        "meta_type": metadata.Meta,
        "meta_fields": tuple(a.name for a in attrs.fields(metadata.Meta)),
        "no_headers": metadata.NO_HEADERS,
        "damage_type": record.Damage,
        "encode_puts": fallback.encode_puts,
        "encode_putx": fallback.encode_putx,
        "decode_many": fallback.decode_many,
        "decode_one": record.decode_one,
        "decode_columns": fallback.decode_columns,
        "walk_puts": fallback.walk_puts,
        "unit_records": fallback.unit_records,
        "checked_headers": metadata.checked_headers,
        "encode_meta": metadata.encode_parts,
    }


def adopt(module: ModuleType) -> str | None:
    """Check a compiled ``_speedups`` and configure it with the layout and the references.

    Returns ``None`` when it is ready to use, else why not (a stale build's ABI, or the
    constants it refused); a refused module is left as it was.
    """
    abi = getattr(module, "ABI_VERSION", None)
    if abi != ABI_VERSION:
        return f"the compiled extension has ABI {abi}, this code needs {ABI_VERSION}: rebuild it"
    try:
        module.configure(**configure_arguments())
    except (TypeError, ValueError) as exc:
        return f"the compiled extension refused the format: {exc}"
    return None


def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get(ENV_VAR, "") not in ("", "0"):
        return None, f"pure Python ({ENV_VAR}={os.environ[ENV_VAR]})"
    try:
        from journaled.format import _speedups
    except ImportError:
        return None, "pure Python (the compiled extension is not built)"
    refused = adopt(_speedups)
    if refused is not None:
        return None, f"pure Python ({refused})"
    return _speedups, f"compiled (C extension, CRC32C by {_speedups.crc})"


#: The configured ``_speedups`` module, or ``None`` when the references run.
native, _description = _load()
#: ``"compiled"`` or ``"pure-python"``: the implementation of the hot path in this process.
implementation: Final = "compiled" if native is not None else "pure-python"


def describe() -> str:
    """One line for humans, e.g. ``compiled (C extension, CRC32C by sse4.2)``, or ``pure Python
    (...)`` with the reason."""
    return _description


#: ``fallback.encode_puts`` or its compiled twin (anything off the twin's fast path -- an argument
#: of another type, a number outside its field -- is handed to the reference).
encode_puts = fallback.encode_puts if native is None else native.encode_puts
#: ``fallback.encode_putx`` or its compiled twin (one PUTX record: an argument off the twin's fast
#: path is handed to the reference).
encode_putx = fallback.encode_putx if native is None else native.encode_putx
#: ``fallback.decode_many`` or its compiled twin (records that are not well-formed PUTs, or PUTXs
#: carrying only a producer's tag, are classified by record.decode_one, so damage is described
#: exactly as by the reference).
decode_many = fallback.decode_many if native is None else native.decode_many
#: ``fallback.walk_puts`` or its compiled twin (anything but a well-formed PUT or tag-only PUTX, and
#: every argument off its fast path, is handed to the reference from there on).
walk_puts = fallback.walk_puts if native is None else native.walk_puts
#: ``metadata.checked_headers`` or its compiled twin (an exact dict of exact str to exact bytes
#: within the limits; anything else, and every error, is the reference's).
checked_headers = metadata.checked_headers if native is None else native.checked_headers
#: ``metadata.encode_parts`` or its compiled twin (exact ints within their fields, a key of None or
#: bytes, a bytes block; anything else is the reference's).
encode_meta = metadata.encode_parts if native is None else native.encode_meta
#: ``fallback.decode_columns`` or its compiled twin (the same rows, bytes and stop reason).
decode_columns = fallback.decode_columns if native is None else native.decode_columns
#: ``fallback.unit_records`` or its compiled twin (a unit's inner bytes that are anything but
#: ``count`` well-formed PUT/PUTX records with ids in order go to the reference, which says why).
unit_records = fallback.unit_records if native is None else native.unit_records


def item_twins(
    item_type: type[T], meta_item: Callable[..., T]
) -> tuple[NewItem[T], NewItems[T], ItemsFromPuts[T]]:
    """``new_item``, ``new_items`` and ``items_from_puts`` building ``item_type`` (journaled.item's
    ``Item``, which calls this once at import; ``meta_item`` builds the items of PUTX records): the
    compiled twins, configured with the class and the references of
    :func:`fallback.item_references`, or those references.  The compiled ``items_from_puts`` takes
    records of exactly ``record.Put`` and ``record.PutX`` (building the item of a PUTX that carries a
    key, headers or a not-before with ``meta_item``, as the reference does) and hands the rest to
    the reference."""
    references = fallback.item_references(item_type, meta_item)
    if native is None:
        return references
    new_item, new_items, items_from_puts = references
    extra: dict[str, Any] = {}
    if isinstance(meta_item, type) and attrs.has(meta_item):
        # the C new_meta_item then builds the class itself (else it calls meta_item)
        extra["meta_item_fields"] = tuple(a.name for a in attrs.fields(meta_item))
    native.configure_items(
        item_type=item_type,
        item_fields=fallback.ITEM_FIELDS,
        new_item=new_item,
        new_items=new_items,
        items_from_puts=items_from_puts,
        meta_item=meta_item,
        **extra,
    )
    return native.new_item, native.new_items, native.items_from_puts


def meta_twins(meta_item_type: type[T]) -> tuple[NewMeta, NewMetaItem[T]]:
    """``new_meta`` and ``new_meta_item`` (journaled.item's ``MetaItem``, which calls this once at
    import, after :func:`item_twins` with the same class): the compiled twins, which leave the
    objects out of the cyclic collector's walks when nothing they hold can lead back to them, or
    the references of :func:`fallback_meta.meta_references`."""
    references = meta_references(meta_item_type)
    if native is None:
        return references
    return native.new_meta, native.new_meta_item
