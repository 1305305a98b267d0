"""The README as a newcomer uses it (issue 38, points 5 and 6): every Python block in it runs as
written (and every block of docs/guide.md that makes its own directories), it gives one
command for the main job and one for the tests, and CI runs exactly that test command."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from support.docblocks import blocks, first_line, read, run_block, spark_missing

ROOT = Path(__file__).resolve().parent.parent
README = read("README.md")
GUIDE = read("docs/guide.md")


README_BLOCKS = blocks(README, "python")


@pytest.mark.parametrize(
    "n",
    [
        pytest.param(n, marks=[pytest.mark.slow] if "pyspark" in b else [])
        for n, b in enumerate(README_BLOCKS)
    ],
    ids=lambda n: first_line(README_BLOCKS[n]),
)
def test_every_python_block_of_the_readme_runs_as_written(n, tmp_path):
    code = README_BLOCKS[n]
    if "pyspark" in code:
        why = spark_missing()
        if why:
            pytest.skip(why)
        run_block(code, tmp_path, timeout=600)
    else:
        run_block(code, tmp_path, timeout=120)


GUIDE_BLOCKS = [b for b in blocks(GUIDE, "python") if "tempfile" in b]  # self-contained ones


@pytest.mark.parametrize("n", range(len(GUIDE_BLOCKS)), ids=lambda n: first_line(GUIDE_BLOCKS[n]))
def test_every_self_contained_python_block_of_the_guide_runs_as_written(n, tmp_path):
    run_block(GUIDE_BLOCKS[n], tmp_path, timeout=120)


def test_the_readme_has_recipes_for_fan_out_jobs_metadata_and_spark_and_fits_two_screens():
    headings = re.findall(r"^### (.*)$", README, re.M)
    for topic in ("Fan-out", "job queue across processes", "Items that carry more", "Spark"):
        assert any(topic in h for h in headings), (topic, headings)
    assert len(README.splitlines()) <= 160, len(README.splitlines())


def test_the_job_queue_recipe_says_what_a_worker_must_know():
    section = README.split("### A job queue across processes", 1)[1].split("\n### ", 1)[0]
    rules = (
        "at least once",
        "idempotent",
        "OwnerLost",
        "cannot pass a dead-letter queue",
        "journaled config",
    )
    for must in rules:
        assert must in section, must


def commands() -> tuple[str, str]:
    """The README's command that runs the main job and the one that runs the tests."""
    sh = [b.strip() for b in blocks(README, "sh")]
    main_job = [c for c in sh if c.endswith("journaled qtest")]
    tests = [c for c in sh if c.endswith("pytest")]
    assert len(main_job) == 1 and len(tests) == 1, sh
    return main_job[0], tests[0]


def test_ci_runs_exactly_the_readmes_test_command():
    _, tests = commands()
    *setup, run = tests.split(" && ")
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert " && ".join(setup) in ci, f"{' && '.join(setup)!r} is not a line of .ci/run"
    ran = [shlex.split(line) for line in ci if line.endswith(run)]
    assert any(words[-len(shlex.split(run)) :] == shlex.split(run) for words in ran), run
    assert run.split("/")[-1] == "pytest" and len(shlex.split(run)) == 1  # the whole suite, no options


def test_the_readme_says_how_to_install_before_the_package_is_published():
    install = README.split("## Install", 1)[1].split("\n## ", 1)[0]
    assert "pip install ." in install and "python -m build" in install and ".whl" in install
    assert "journaled[" not in README  # `pip install 'journaled[spark]'` works from no index yet
    assert "journaled stat" in install  # where the user sees whether the compiled part runs
