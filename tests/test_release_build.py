"""Install as written (issue 38, point 6): ``python -m build`` makes an sdist and a wheel that
``twine check`` accepts, and a fresh virtual environment that installs the wheel (nothing of the
checkout on its path) runs the main job, ``journaled qtest``, to a validated end.

Slow (a build, a virtual environment and the main job: about a minute), and run in CI as part
of the suite.  It needs the registry pip is set up with, for the build's setuptools and for
journaled's dependencies, as any install does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from journaled import hotpath

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("build", reason="build is part of the test extra")
pytest.importorskip("twine", reason="twine is part of the test extra")

# What the checkout has that a build must not see (environments, builds, caches, compiled files).
IGNORE = shutil.ignore_patterns(
    ".git", ".venv*", "build", "dist", "site", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", "*.so"
)
# A process environment without the test run's own paths, as a user's shell would have.
CLEAN_ENV = {
    k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH", "JOURNALED_PURE_PYTHON")
}


def run(*cmd: str | Path, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=CLEAN_ENV
    )
    assert proc.returncode == 0, f"{cmd}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


# a build (an isolated environment, mypyc, a C compile) and an install: past the suite's 300 s on a
# loaded machine (CI runs two workers per core); the subprocess timeouts inside bound it
@pytest.mark.timeout(1500)
@pytest.mark.slow
@pytest.mark.skipif(
    bool(os.environ.get("JOURNALED_PURE_PYTHON")),
    reason="the release is built and run once per CI run, with the compiled hot path (it takes a minute)",
)
def test_built_sdist_and_wheel_pass_twine_check_and_the_wheel_runs_the_main_job(tmp_path):
    src = tmp_path / "src"  # a copy, so the build writes nothing into the checkout
    shutil.copytree(ROOT, src, ignore=IGNORE)
    dist = tmp_path / "dist"
    # sdist first, then the wheel built from the sdist: what the sdist lacks, the wheel lacks
    run(sys.executable, "-m", "build", "--outdir", dist, src, cwd=tmp_path)
    (sdist,) = dist.glob("journaled-*.tar.gz")
    (wheel,) = dist.glob("journaled-*.whl")
    check = run(sys.executable, "-m", "twine", "check", "--strict", sdist, wheel, cwd=tmp_path)
    assert check.stdout.count("PASSED") == 2, check.stdout

    with tarfile.open(sdist) as tar:
        in_sdist = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    for needed in ("README.md", "setup.py", "journaled/format/_speedups.c", "journaled/hotpath.py"):
        assert needed in in_sdist, needed
    with zipfile.ZipFile(wheel) as whl:
        in_wheel = set(whl.namelist())
    for needed in (
        "journaled/py.typed",
        "pyspark_journaled.py",
        "journaled/cli/status.html",
        "journaled/format/_speedups.pyi",
    ):
        assert needed in in_wheel, (needed, sorted(in_wheel)[:20])
    # the build's isolated environment compiles the hot path with mypyc (it needs the runtime
    # dependencies too, to type-check what the compiled modules import): a wheel without it
    # would silently run plain Python
    for module in hotpath.COMPILED_MODULES:
        stem = module.replace(".", "/") + "."
        assert any(n.startswith(stem) and n.endswith(".so") for n in in_wheel), (module, sorted(in_wheel))

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    run(venv / "bin" / "python", "-m", "pip", "install", "-q", wheel, cwd=tmp_path)
    where = run(
        venv / "bin" / "python",
        "-c",
        "import journaled, journaled.format.speedups as s; print(journaled.__file__); print(s.describe())",
        cwd=tmp_path,
    ).stdout.splitlines()
    assert where[0].startswith(str(venv)), where  # the installed wheel, not the checkout
    job = run(venv / "bin" / "journaled", "qtest", cwd=tmp_path, timeout=900)
    assert "FAIL" not in job.stdout, job.stdout[-3000:]
