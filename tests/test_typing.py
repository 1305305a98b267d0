"""`mypy --strict journaled` must stay clean: CI runs only pytest, so this is where mypy runs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("mypy", reason="mypy is part of the dev extra: pip install -e '.[dev]'")

# journaled.spark subclasses PySpark's data source classes and is checked against PySpark's own
# annotations, so it can only be checked where PySpark is installed (the spark extra, in dev); the
# rest of the package is checked without it (nothing else imports journaled.spark).
HAVE_PYSPARK = importlib.util.find_spec("pyspark") is not None


def run_mypy(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_package_is_marked_typed():
    assert (ROOT / "journaled" / "py.typed").is_file()


def test_mypy_strict_is_clean_on_the_package_and_on_a_user_program(tmp_path):
    """One mypy run (it is the slow part): the package itself, plus a strict-typed user program
    using the Python-ecosystem API (the pickle and json modules satisfy the Serializer
    protocol, async methods are awaitable, the wrappers are generic, ...)."""
    user = tmp_path / "user_code.py"
    user.write_text(
        textwrap.dedent(
            """
        import json
        import pickle

        import journaled
        from journaled import Item, JournaledQueue, Queue, Transaction

        async def consume(r: journaled.Reader) -> list[bytes]:
            out: list[bytes] = []
            first: Item = await r.aget(timeout=1.0)
            r.commit(first)
            async with r.atransaction(timeout=1.0) as item:
                out.append(item.data)
            async for item in r.aiter(timeout=0.1):
                out.append(item.data)
            async for item in r:
                break
            return out

        def main(path: str) -> None:
            q: Queue[dict[str, int]] = Queue(path, 10, serializer=pickle)
            d: dict[str, int] = q.get()
            print(d)
            q2: Queue[object] = Queue(path + "2", serializer=json)
            q.put({"a": 1}, timeout=1.0)
            q.get(timeout=1.0)
            q.task_done()
            q2.close()
            with JournaledQueue(path + "3") as jq:
                r = jq.reader("r")
                with r.transaction(timeout=1.0) as it:
                    n: int = it.id
                for it in r.iter(timeout=0.1):
                    print(it.data, n)
                tq = jq.transactional_queue(r, serializer=pickle)
                t: Transaction[object] = tq.get(timeout=1.0)
                t.commit()
                ok: bool = jq.blocking_queue("b").put(b"x")
                print(ok)
        """
        )
    )
    proc = run_mypy("--exclude", "^journaled/spark/", "journaled", str(user))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.skipif(
    not HAVE_PYSPARK,
    reason="journaled.spark is checked against PySpark's annotations: pip install -e '.[spark]' or '.[dev]'",
)
def test_mypy_strict_is_clean_on_the_spark_integration():
    proc = run_mypy("journaled/spark")
    assert proc.returncode == 0, proc.stdout + proc.stderr
