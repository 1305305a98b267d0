"""What a fresh interpreter imports: for the tests that keep Spark's Python workers light.

Spark runs a data source's planning, reading and writing in Python workers of their own, each
paying for every module it imports; these tests run a small program in a new interpreter (the
project's source first on its path) and look at ``sys.modules`` when it ends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from support.paths import ROOT

#: Appended to every program: the sorted module names, as JSON, on the last line of its output.
_PRINT_MODULES = "\nimport json as _json, sys as _sys\nprint(_json.dumps(sorted(_sys.modules)))\n"


def run_and_list_modules(code: str, *args: str) -> tuple[list[str], set[str]]:
    """Run ``code`` with ``args`` in a new interpreter; return what it printed before the module
    list (its lines) and the names of the modules loaded when it ended."""
    proc = subprocess.run(
        [sys.executable, "-c", code + _PRINT_MODULES, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    *printed, modules = proc.stdout.splitlines()
    return printed, set(json.loads(modules))
