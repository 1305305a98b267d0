"""Which implementation of the hot path is in use: the compiled one or the pure-Python reference.

The compiled extension ``journaled.format._speedups`` (built from ``journaled/format/_speedups.c`` by
``pip install``, where a C compiler exists) is the twin of format/record.py's two per-record loops,
``encode_puts`` and ``decode_many`` (and of item.py's ``new_item``/``new_items``); those stay the
pure-Python reference and the fallback.  Both write byte-identical journals and decode
identically, error for error.  ``decode_columns`` is the twin of format/columns.py's columnar decoder
(the Spark source's hot loop).  The writer and the record walker call :data:`encode_puts` and
:data:`decode_many` from here: the compiled twin when it runs, else format/record.py's functions.
Setting ``JOURNALED_PURE_PYTHON=1`` in the environment before journaled is imported forces the
fallback.
"""

from __future__ import annotations

import os
from types import ModuleType

import attrs

from journaled.format import columns, record

#: The environment variable that, set to anything but ``""`` or ``"0"``, forces pure Python.
ENV_VAR = "JOURNALED_PURE_PYTHON"


def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get(ENV_VAR, "") not in ("", "0"):
        return None, f"pure Python ({ENV_VAR}={os.environ[ENV_VAR]})"
    try:
        from journaled.format import _speedups
    except ImportError:
        return None, "pure Python (the compiled extension is not built)"
    return _speedups, f"compiled (C extension, CRC32C by {_speedups.crc})"


native, description = _load()
#: ``"compiled"`` or ``"pure-python"``: the implementation of the hot path in this process.
implementation = "compiled" if native is not None else "pure-python"


def describe() -> str:
    """One line for humans, e.g. ``compiled (C extension, CRC32C by sse4.2)``."""
    return description


#: ``record.encode_puts`` or its compiled twin (anything off the twin's fast path -- an argument
#: of another type, a number outside its field -- is handed to record.encode_puts).
encode_puts = record.encode_puts
#: ``record.decode_many`` or its compiled twin (records that are not well-formed PUTs are
#: classified by record.decode_one, so damage is described exactly as by the reference).
decode_many = record.decode_many
if native is not None:
    native.configure(
        record.Put,
        tuple(a.name for a in attrs.fields(record.Put)),
        record.encode_puts,
        record.decode_many,
        record.decode_one,
        record.Damage,
        record.MAX_BODY,
    )
    encode_puts = native.encode_puts
    decode_many = native.decode_many
#: ``columns.decode_columns`` or its compiled twin (the same rows, bytes and stop reason); an
#: extension built before the twin existed leaves the reference in place.
decode_columns = columns.decode_columns
if native is not None and hasattr(native, "decode_columns"):
    native.configure_columns(columns.decode_columns, columns.MAX_BATCH_BYTES)
    decode_columns = native.decode_columns
