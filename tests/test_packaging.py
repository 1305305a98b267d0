"""Packaging: the extras, the editable install a type checker can see, the committed reference."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# What the checkout has that an install from a copy of it must not see (as tests/test_release_build.py).
IGNORE = shutil.ignore_patterns(
    ".git", ".venv*", "build", "dist", "site", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", "*.so"
)

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")


def _extras() -> dict[str, list[str]]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return dict(tomllib.load(f)["project"]["optional-dependencies"])


def _resolved(extra: str, extras: dict[str, list[str]]) -> set[str]:
    """Distribution names an extra pulls in, following ``journaled[...]`` self-references."""
    out: set[str] = set()
    for req in extras[extra]:
        name = re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0].lower()
        if name == "journaled":
            for inner in re.search(r"\[(.*?)\]", req).group(1).split(","):  # type: ignore[union-attr]
                out |= _resolved(inner.strip(), extras)
        else:
            out.add(name)
    return out


def test_docs_extra_builds_the_reference_without_pyspark():
    extras = _extras()
    docs = _resolved("docs", extras)
    assert {"mkdocs", "mkdocstrings"} <= docs
    assert not docs & {"pyspark", "pyarrow"}, docs


def test_extras_are_split_into_test_docs_spark_browser_and_dev_is_all_of_them():
    extras = _extras()
    test, docs, spark, browser = (_resolved(e, extras) for e in ("test", "docs", "spark", "browser"))
    assert {"pytest", "hypothesis", "pytest-timeout", "pytest-asyncio", "mypy"} <= test
    assert not test & {"pyspark", "pyarrow", "mkdocs", "selenium"}
    assert {"pyspark", "pyarrow"} <= spark
    assert browser == {"selenium"}
    assert _resolved("dev", extras) == test | docs | spark | browser


USER_PROGRAM = """\
import journaled

def backlog(path: str) -> int:
    with journaled.JournaledQueue(path) as q:
        ids: list[int] = q.put_many([b"a", b"b"])
        return len(ids)
"""

MISUSE = """\
import journaled

def wrong(path: str) -> None:
    with journaled.JournaledQueue(path) as q:
        q.put_many(42)
"""


# a build (an isolated environment, mypyc, a C compile) and an install: past the suite's 300 s on a
# loaded machine (CI runs two workers per core); the subprocess timeouts inside bound it
@pytest.mark.timeout(1500)
@pytest.mark.slow
def test_user_code_type_checks_against_the_readmes_editable_install(tmp_path):
    """`pip install -e .` (the README's install, without the heavy extras) gives a type checker
    journaled's types: a correct program passes mypy --strict and a misuse is reported.

    The install skips the mypyc part of the build (``JOURNALED_MYPYC=0``, setup.py): a type
    checker reads the ``.py`` files and ``py.typed``, never the compiled ``.so`` beside them, so
    its verdict is the same (the compile took 25-45 s of this test).  That the README's install
    compiles the hot path is checked where it is the subject: CI's own install is that editable
    install and asserts ``hotpath.describe()`` says compiled (.ci/run), and the release build's
    wheel must hold every compiled module (tests/test_release_build.py)."""
    pytest.importorskip("mypy", reason="mypy is part of the test extra")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    install_env = dict(env, JOURNALED_MYPYC="0")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env, timeout=300)
    py = venv / "bin" / "python"
    # Installed from a copy: an editable install builds the compiled modules in place, and in the
    # checkout it would replace the .so files that the rest of the suite (another pytest-xdist
    # worker, the processes it starts) is importing at that moment.
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=IGNORE)
    compiled = {p: p.stat().st_mtime_ns for p in (ROOT / "journaled").rglob("*.so")}
    pip = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "-e", str(src)],
        capture_output=True,
        text=True,
        env=install_env,
        timeout=600,
        cwd=tmp_path,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    rewritten = sorted(str(p.relative_to(ROOT)) for p, t in compiled.items() if p.stat().st_mtime_ns != t)
    assert not rewritten, f"the install rewrote the checkout's compiled modules under the suite: {rewritten}"
    user = tmp_path / "user"
    user.mkdir()
    (user / "good.py").write_text(USER_PROGRAM)
    (user / "bad.py").write_text(MISUSE)

    # One cache, new with this test, for both runs: the second reads journaled's analysis from
    # the first instead of doing it again (about half of each run); nothing older than this
    # install can be in it.
    cache = tmp_path / "mypy-cache"

    def mypy(name: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "mypy",
                "--strict",
                "--cache-dir",
                str(cache),
                "--python-executable",
                str(py),
                "--config-file",
                os.devnull,
                name,
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
            cwd=user,  # outside the repository
        )

    good = mypy("good.py")
    assert good.returncode == 0, good.stdout + good.stderr
    bad = mypy("bad.py")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "put_many" in bad.stdout and "[arg-type]" in bad.stdout, bad.stdout


def _generate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_api_md.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_committed_reference_md_is_what_the_generator_writes_now():
    proc = _generate("--stdout")
    assert proc.returncode == 0, proc.stderr
    committed = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    assert committed == proc.stdout, "docs/reference.md is stale: run python scripts/gen_api_md.py"


def test_reference_md_holds_the_public_names_with_their_docstrings():
    text = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    for heading in (
        "### `JournaledQueue`",
        "### `Reader`",
        "### `QueueConfig`",
        "#### `put_many",
        "#### `commit",
        "### `spool_put",
    ):
        assert heading in text, heading
    import journaled

    assert textwrap.dedent(journaled.JournaledQueue.__doc__ or "").strip().splitlines()[0] in text


def test_reference_generator_has_help_and_a_check_mode(tmp_path):
    help_ = _generate("--help")
    assert help_.returncode == 0 and "reference.md" in help_.stdout
    assert _generate("--check").returncode == 0
    stale = tmp_path / "reference.md"
    stale.write_text("old\n")
    check = _generate("--check", "--output", str(stale))
    assert check.returncode == 1 and "stale" in check.stderr


def test_readme_says_where_the_reference_is():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/reference.md" in readme
