"""One source, two ways to run it: the modules mypyc compiles run as their build or as their .py
files, and ``journaled.hotpath`` says which, truthfully (docs/design.md, "The compiled hot path").

Each way is checked in a fresh interpreter, as a user gets it: ``JOURNALED_PURE_PYTHON`` is read
when the package is first imported.
"""

from __future__ import annotations

import ast
import glob
import json
import os
import subprocess
import sys

import pytest

from journaled import hotpath

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROBE = """
import json, journaled, journaled.hotpath as h, importlib
mods = {n: importlib.import_module(n).__file__ for n in h.COMPILED_MODULES}
print(json.dumps({"files": mods, "describe": h.describe(), "impl": h.implementations()}))
"""


def probe(pure: str | None) -> dict[str, object]:
    env = dict(os.environ)
    env.pop(hotpath.ENV_VAR, None)
    if pure is not None:
        env[hotpath.ENV_VAR] = pure
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    result: dict[str, object] = json.loads(out.stdout)
    return result


def built() -> bool:
    """Does every listed module have a compiled build beside its source (an in-place build)?"""
    return all(
        glob.glob(os.path.join(ROOT, *name.split(".")) + ".cpython-*") for name in hotpath.COMPILED_MODULES
    )


def test_the_pure_switch_runs_the_very_same_source_files_even_beside_a_build():
    seen = probe("1")
    files = seen["files"]
    assert isinstance(files, dict)
    for name, path in files.items():
        assert path == os.path.join(ROOT, *name.split(".")) + ".py", (name, path)
    assert set(seen["impl"].values()) == {"pure Python"}  # type: ignore[attr-defined]
    assert seen["describe"] == f"pure Python ({hotpath.ENV_VAR}=1)"


@pytest.mark.skipif(not built(), reason="no mypyc build in place (setup.py build_ext --inplace)")
def test_without_the_switch_the_build_runs_and_describe_says_so():
    for pure in (None, "0"):
        seen = probe(pure)
        files = seen["files"]
        assert isinstance(files, dict)
        for name, path in files.items():
            assert hotpath.is_compiled_file(path), (name, path)  # the extension module, not the .py
        assert set(seen["impl"].values()) == {"compiled"}  # type: ignore[attr-defined]
        assert str(seen["describe"]).startswith("compiled (mypyc")


def test_setup_compiles_exactly_the_modules_hotpath_lists():
    tree = ast.parse(open(os.path.join(ROOT, "setup.py"), encoding="utf-8").read())
    listed = next(
        ast.literal_eval(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "MYPYC_MODULES"
    )
    assert [p.removesuffix(".py").replace("/", ".") for p in listed] == list(hotpath.COMPILED_MODULES)


def test_the_finder_leaves_every_other_module_alone():
    finder = hotpath.SourceFinder()
    assert finder.find_spec("journaled.queue", [os.path.join(ROOT, "journaled")]) is None
    assert finder.find_spec("journaled.core.readercore", None) is None  # a top-level lookup
    spec = finder.find_spec("journaled.core.readercore", [os.path.join(ROOT, "journaled", "core")])
    assert spec is not None and spec.origin == os.path.join(ROOT, "journaled", "core", "readercore.py")
