"""The API reference (mkdocs + mkdocstrings, from the docstrings) builds with --strict."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("mkdocs", reason="mkdocs is part of the dev extra: pip install -e '.[dev]'")
pytest.importorskip("mkdocstrings_handlers.python", reason="mkdocstrings[python] is in the dev extra")


def test_docs_build_strict(tmp_path):
    site = tmp_path / "site"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(site),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    api = (site / "api" / "index.html").read_text()
    # the reference is generated from the docstrings, not hand-written
    for anchor in (
        "journaled.Queue.task_done",
        "journaled.Reader.iter",
        "journaled.Reader.aget",
        "journaled.wrappers.Transaction.rollback",
        "journaled.JournaledQueue.aput",
    ):
        assert f'id="{anchor}"' in api, anchor
