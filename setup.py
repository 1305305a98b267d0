"""Build the optional compiled hot path (journaled/format/_speedups.c, journaled/core/_coreops.c,
journaled/owner/_putops.c);
everything else is in pyproject.toml.

Where the extension cannot be built (no C compiler, no Python headers) the install still
succeeds, prints one line, and journaled runs its pure-Python implementation.
"""

from __future__ import annotations

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


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
            self._notice(exc)

    @staticmethod
    def _notice(exc: BaseException) -> None:
        text = str(exc).strip()
        reason = (text.splitlines()[-1] if text else type(exc).__name__)[:160]
        print(
            f"journaled: compiled speedups not built ({reason}); using the pure-Python implementation",
            file=sys.stderr,
        )


setup(
    ext_modules=[
        Extension("journaled.format._speedups", ["journaled/format/_speedups.c"], optional=True),
        Extension(
            "journaled.core._coreops",
            ["journaled/core/_coreops.c"],
            depends=["journaled/_twins.h"],
            optional=True,
        ),
        Extension(
            "journaled.owner._putops",
            ["journaled/owner/_putops.c"],
            depends=["journaled/_twins.h"],
            optional=True,
        ),
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
