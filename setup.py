"""Build the optional compiled hot path; everything else is in pyproject.toml.

Two kinds of compiled code, both optional:

* ``journaled/format/_speedups.c``: the format's byte loops (CRC, record bytes), hand-written C
  over bytes and plain values, with its pure-Python reference in ``format/fallback.py``.
* the modules in :data:`MYPYC_MODULES`, compiled by mypyc from the very ``.py`` files that run as
  plain Python elsewhere (one source: docs/design.md, "The compiled hot path").  mypyc ships with
  mypy (``[build-system] requires``); where it is missing, or its build fails, the install goes on.

Where a part cannot be built (no C compiler, no Python headers, no mypyc) the install still
succeeds, prints one line, and journaled runs those modules as plain Python.
``JOURNALED_MYPYC=0`` skips the mypyc part on purpose (a quick build of the C extension only).
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

#: The modules mypyc compiles (the reader core, what it calls per item, the put path).
#: journaled.hotpath names the same list (``COMPILED_MODULES``, checked by tests/test_hotpath.py),
#: which ``JOURNALED_PURE_PYTHON=1`` loads from source.
MYPYC_MODULES = [
    "journaled/core/readercore.py",
    "journaled/core/calls.py",
    "journaled/core/keyorder.py",
    "journaled/core/holding.py",
    "journaled/core/retry.py",
    "journaled/core/readbehind.py",
    "journaled/core/policies.py",
    "journaled/owner/putpath.py",
    "journaled/log/writer.py",
    "journaled/log/state.py",
]


class OptionalBuildExt(build_ext):
    """``build_ext`` that turns a failed compile into a one-line notice instead of an error."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any build failure means "use the fallback"
            self._notice(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            self._notice(exc, ext.name)

    @staticmethod
    def _notice(exc: BaseException, what: str = "") -> None:
        text = str(exc).strip()
        reason = (text.splitlines()[-1] if text else type(exc).__name__)[:160]
        part = f" {what}" if what else ""
        print(
            f"journaled: compiled{part} not built ({reason}); using the pure-Python implementation",
            file=sys.stderr,
        )


def mypyc_extensions() -> list[Extension]:
    """The mypyc-compiled modules, or none (with the one-line notice) where mypyc cannot run."""
    if os.environ.get("JOURNALED_MYPYC", "") == "0":
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        OptionalBuildExt._notice(ImportError("mypyc is not installed"), "hot path")
        return []
    try:
        # A build directory per interpreter (build/mypyc-cpython-313 ...): CI builds for several
        # Pythons at once in one checkout, and mypyc's generated C differs between them.
        target = os.path.join("build", f"mypyc-{sys.implementation.cache_tag}")
        exts = mypycify(MYPYC_MODULES, opt_level="3", group_name="journaled_hot", target_dir=target)
    except BaseException as exc:  # noqa: BLE001 - mypy's errors end in SystemExit
        OptionalBuildExt._notice(exc, "hot path (mypyc)")
        return []
    for ext in exts:
        ext.optional = True  # type: ignore[attr-defined]
    return list(exts)


setup(
    ext_modules=[
        Extension("journaled.format._speedups", ["journaled/format/_speedups.c"], optional=True),
        *mypyc_extensions(),
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
