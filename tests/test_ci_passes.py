"""CI's two passes (docs/testing.md): the tables in tests/conftest.py that decide what the pure-Python
pass leaves out and how pytest-xdist shares the tests out name real files, and no test left out of
the pure pass imports the code that differs between the compiled and the pure build."""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import conftest
from journaled import hotpath

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
TEST_FILES = sorted(p.relative_to(TESTS).as_posix() for p in TESTS.rglob("test_*.py"))

# What runs differently compiled and pure: the mypyc-compiled modules and the C codec's switch.
TWO_WAY = set(hotpath.COMPILED_MODULES) | {"journaled.format.speedups", "journaled.format._speedups"}


def test_every_pattern_of_the_tables_names_an_existing_test_file():
    patterns = [*conftest.BUILD_INDEPENDENT, *conftest.TWINS, *conftest.SLOW_FIRST]
    stale = [p for p in patterns if not fnmatch.filter(TEST_FILES, p)]
    assert not stale, f"tests/conftest.py names files that are not there: {stale}"


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_no_build_independent_test_imports_a_module_that_runs_two_ways():
    left_out = [f for f in TEST_FILES if any(fnmatch.fnmatch(f, p) for p in conftest.BUILD_INDEPENDENT)]
    assert left_out  # the table is in use
    offenders = {
        f: sorted(_imported(TESTS / f) & TWO_WAY) for f in left_out if _imported(TESTS / f) & TWO_WAY
    }
    assert not offenders, f"build-independent tests that import the hot path: {offenders}"


def test_ci_runs_the_build_independent_tests_once_and_both_passes_in_parallel():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    pure = [line for line in ci if line.startswith("JOURNALED_PURE_PYTHON=1 ")]
    assert len(pure) == 1 and pure[0].endswith('.venv/bin/pytest -m "not build_independent"'), pure
    assert 'PYTEST_ADDOPTS="$parallel"' in pure[0]
    main = [line for line in ci if line.endswith("step .venv/bin/pytest")]
    assert main == ['PYTEST_ADDOPTS="$parallel" step .venv/bin/pytest'], main
    assert 'parallel="-n $((2 * $(nproc))) --dist loadfile --no-loadscope-reorder"' in ci
    # the sanitizers run in a process of their own (a finding aborts it), beside the pure pass
    assert "background sanitizers scripts/sanitize_twins.sh --python .venv/bin/python" in ci


def test_hypothesis_has_no_per_example_deadline_in_this_suite():
    """A deadline is a wall-clock bound: on a machine shared with other test runs (two xdist
    workers, other processes) one example of the pure codec took 320 ms against the default
    200 ms, and 0.08 ms when hypothesis ran it again (FlakyFailure). No test here is about
    hypothesis' per-example time; the ones about time measure it themselves."""
    from hypothesis import settings

    assert settings.default.deadline is None, settings.default.deadline


def test_the_twin_files_left_out_of_the_pure_pass_compare_the_extension_with_its_reference_directly():
    """A twin file is left out of the pure pass because it imports the C codec itself and its
    reference (format/fallback.py) and compares them whatever the switch selects; it may import
    the switch (``speedups``, to configure the extension) but no mypyc-compiled module, whose
    build would decide what it checks."""
    compiled = set(hotpath.COMPILED_MODULES)
    for f in conftest.TWINS:
        names = _imported(TESTS / f)
        assert "journaled.format._speedups" in names, f"{f} does not import the extension itself"
        references = {"journaled.format.fallback", "journaled.format.record", "journaled.format.compressed"}
        assert names & references, f"{f} imports no reference to compare the extension with"
        assert not names & compiled, f"{f} imports a mypyc-compiled module: {sorted(names & compiled)}"
        assert not any(fnmatch.fnmatch(f, p) for p in conftest.BUILD_INDEPENDENT), f"{f} is in both tables"
