"""The public face, checked: what users import is there and documented, and what moved is gone.

* every name in ``journaled.__all__`` is importable from ``journaled`` and has a docstring
  (``__version__`` is a string); ``__all__`` is sorted and has no duplicates;
* every module users import by name (docs/api.md, the README) imports;
* every old module path that CHANGELOG.md lists as moved ("### Changed (layout)") is gone
  (``ModuleNotFoundError``, or the name is now the folder that holds the module) and its new
  path exists, so the changelog's list stays true.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re

import pytest

import journaled
from journaled import hotpath

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHANGELOG = os.path.join(ROOT, "CHANGELOG.md")

#: Modules users import by name: the package root's, and the one subpackage module the docs
#: send users to.
PUBLIC_MODULES = [
    "journaled.txn",
    "journaled.aio",
    "journaled.wrappers",
    "journaled.stats",
    "journaled.errors",
    "journaled.config",
    "journaled.item",
    "journaled.serializers",
    "journaled.deadletter",
    "journaled.stdqueue",
    "journaled.reader",
    "journaled.queue",
    "journaled.spark",
    "journaled.disk.bookmarks",  # external-reader bookmarks (docs/spark.md, docs/reference.md)
]


def _moved() -> list[tuple[str, str]]:
    """(old path, new path) for every row of the table in CHANGELOG.md's "### Changed (layout)"."""
    text = open(CHANGELOG, encoding="utf-8").read()
    section = text.split("### Changed (layout)", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
    return re.findall(r"^\| `(journaled[\w.]*)` \| `(journaled[\w.]*)`", section, re.MULTILINE)


MOVED = _moved()


@pytest.mark.parametrize("name", journaled.__all__)
def test_every_exported_name_is_importable_and_documented(name):
    obj = getattr(journaled, name)
    if name == "__version__":
        assert isinstance(obj, str) and obj
        return
    assert (obj.__doc__ or "").strip(), f"journaled.{name} has no docstring"


def test_all_has_no_duplicates():
    assert len(set(journaled.__all__)) == len(journaled.__all__)


def test_all_is_sorted():
    assert journaled.__all__ == sorted(journaled.__all__)


def test_star_import_gives_exactly_all():
    namespace: dict[str, object] = {}
    exec("from journaled import *", namespace)
    namespace.pop("__builtins__")
    assert sorted(namespace) == sorted(journaled.__all__)


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_public_module_imports(module):
    if module == "journaled.spark":
        pytest.importorskip("pyspark")
    mod = importlib.import_module(module)
    assert (mod.__doc__ or "").strip(), f"{module} has no docstring"


def test_changelog_lists_the_moved_modules():
    assert len(MOVED) >= 50, "the table of moved modules in CHANGELOG.md was not found"
    olds = [old for old, _ in MOVED]
    assert len(set(olds)) == len(olds)
    for old, new in MOVED:
        if old == "journaled.compat":
            assert new == "journaled.stdqueue"
        if old == "journaled.envelope":
            assert new == "journaled.deadletter"


@pytest.mark.parametrize(("old", "new"), MOVED, ids=[old for old, _ in MOVED])
def test_moved_module_is_gone_from_its_old_path(old, new):
    if new.startswith(old + "."):
        # the old module's name is now the folder that holds it: a package, not the module
        assert hasattr(importlib.import_module(old), "__path__"), f"{old} should be a package now"
    else:
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)
    assert importlib.util.find_spec(new) is not None or new.rpartition(".")[2].startswith("_"), (
        f"{new} (the new path of {old}) does not exist"
    )


def test_importing_the_package_loads_a_public_name_only_when_it_is_used() -> None:
    """A Spark worker or a tool that needs one part does not pay for every module at start-up."""
    import subprocess
    import sys

    code = (
        "import sys, journaled\n"
        "print(sorted(m for m in sys.modules if m.startswith('journaled')))\n"
        "journaled.JournaledQueue\n"
        "print('journaled.queue' in sys.modules, journaled.txn.__name__)\n"
        "try:\n"
        "    journaled.no_such_name\n"
        "except AttributeError as exc:\n"
        "    print(type(exc).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    # JOURNALED_PURE_PYTHON=1 loads the import hook that runs the compiled modules from source
    first = "['journaled', 'journaled.hotpath']" if hotpath.pure_requested() else "['journaled']"
    assert out.splitlines() == [first, "True journaled.txn", "AttributeError"]
    assert set(journaled.__all__) <= set(dir(journaled))
