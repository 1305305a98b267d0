"""Which implementation of the hot path runs: the modules mypyc compiled, or the same source as Python.

The modules in :data:`COMPILED_MODULES` (setup.py's ``MYPYC_MODULES``) are plain, typed Python
that setup.py also compiles with mypyc where the build can: one source, two ways to run it
(docs/design.md, "The compiled hot path").  Python's import prefers the compiled ``.so`` beside a
``.py``, so ``JOURNALED_PURE_PYTHON=1`` (also the format's switch, journaled.format.speedups)
installs :class:`SourceFinder`, which loads these modules from their source: the package's
``__init__`` calls :func:`install_if_pure` before anything else is imported.

:func:`implementations` and :func:`describe` say what is live, from each module's ``__file__``
(compiled means the module was loaded from its extension module), never from a flag.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Final

#: The modules mypyc compiles, by import name (setup.py's ``MYPYC_MODULES``; a test checks both
#: lists name the same files).
COMPILED_MODULES: Final = (
    "journaled.core.readercore",
    "journaled.core.calls",
    "journaled.core.keyorder",
    "journaled.core.holding",
    "journaled.core.retry",
    "journaled.core.readbehind",
    "journaled.core.policies",
    "journaled.owner.putpath",
    "journaled.log.writer",
    "journaled.log.state",
)
#: Set to anything but "" or "0": run the pure-Python implementation everywhere.
ENV_VAR: Final = "JOURNALED_PURE_PYTHON"


def pure_requested() -> bool:
    """Does the environment ask for the pure-Python implementation (``JOURNALED_PURE_PYTHON``)?"""
    return os.environ.get(ENV_VAR, "") not in ("", "0")


class SourceFinder:
    """A ``sys.meta_path`` finder that loads :data:`COMPILED_MODULES` from their ``.py`` files,
    ahead of the compiled extension modules beside them; every other import is left alone."""

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        """The spec of ``name``'s source file, for the modules listed; None for any other."""
        if name not in COMPILED_MODULES or not path:
            return None
        for folder in path:
            source = os.path.join(folder, name.rpartition(".")[2] + ".py")
            if os.path.isfile(source):
                loader = importlib.machinery.SourceFileLoader(name, source)
                return importlib.util.spec_from_file_location(name, source, loader=loader)
        return None


def install_if_pure() -> bool:
    """Put :class:`SourceFinder` first on ``sys.meta_path`` when the pure implementation is
    asked for (once); True if it is installed."""
    if not pure_requested():
        return False
    if not any(isinstance(f, SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, SourceFinder())
    return True


def is_compiled_file(path: str) -> bool:
    """Is ``path`` an extension module (``.so``/``.pyd``: a build), not a source file?"""
    return path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def is_compiled(module: ModuleType) -> bool:
    """Was ``module`` loaded from an extension module (a mypyc build), not from its source?"""
    return is_compiled_file(getattr(module, "__file__", None) or "")


def implementations() -> dict[str, str]:
    """Each of :data:`COMPILED_MODULES` (imported if need be): ``"compiled"`` or ``"pure Python"``."""
    return {
        name: "compiled" if is_compiled(importlib.import_module(name)) else "pure Python"
        for name in COMPILED_MODULES
    }


def describe() -> str:
    """One line for humans: ``compiled (mypyc, N modules)``, or ``pure Python (...)`` with why."""
    live = implementations()
    compiled = [n for n, how in live.items() if how == "compiled"]
    if len(compiled) == len(live):
        return f"compiled (mypyc, {len(live)} modules)"
    if compiled:
        plain = ", ".join(n for n in live if n not in compiled)
        return f"partly compiled (pure Python: {plain}; rebuild)"
    if pure_requested():
        return f"pure Python ({ENV_VAR}={os.environ[ENV_VAR]})"
    return "pure Python (the mypyc build is not installed)"


__all__ = [
    "COMPILED_MODULES",
    "ENV_VAR",
    "SourceFinder",
    "describe",
    "implementations",
    "install_if_pure",
    "is_compiled",
    "is_compiled_file",
    "pure_requested",
]
