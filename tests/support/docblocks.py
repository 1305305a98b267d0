"""Code blocks of the project's Markdown (README.md, docs/*.md), run as a reader would run them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from support.paths import ROOT


def blocks(text: str, lang: str) -> list[str]:
    """The fenced blocks of ``lang`` in ``text``, in order."""
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)


def read(name: str) -> str:
    """A Markdown file of the project, by its path from the root."""
    return (Path(ROOT) / name).read_text(encoding="utf-8")


def first_line(code: str) -> str:
    """A block's first line, short: its test id."""
    return code.split("\n", 1)[0][:40]


def spark_missing() -> str | None:
    """Why a Spark block cannot run here, or None."""
    for module in ("pyspark", "pyarrow"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (the spark extra)"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "Spark needs Java, and there is none here"
    if os.environ.get("JOURNALED_PURE_PYTHON"):
        return "the Spark blocks run once, with the compiled hot path (each takes a minute)"
    return None


def run_block(code: str, where: Path, timeout: float) -> None:
    """Run ``code`` as a script in ``where`` with journaled importable; fail with its output."""
    script = where / "example.py"
    script.write_text(code, encoding="utf-8")
    path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, cwd=where, env=env
    )
    assert proc.returncode == 0, code + "\n" + proc.stdout[-3000:] + proc.stderr[-3000:]
