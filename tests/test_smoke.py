"""End-to-end smoke test of the README example and the CLI entry points."""

import re
import subprocess
import sys
from pathlib import Path


def test_readme_example_runs_as_written(tmp_path):
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    script = tmp_path / "example.py"
    script.write_text(code)
    subprocess.run([sys.executable, str(script)], check=True, timeout=60)


def test_readme_item_metadata_example_runs_as_written(tmp_path):
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("### Items that carry more", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    script = tmp_path / "metadata_example.py"
    script.write_text(code)
    subprocess.run([sys.executable, str(script)], check=True, timeout=60)


def test_python_dash_m_journaled_shows_help():
    out = subprocess.run(
        [sys.executable, "-m", "journaled", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0
    assert "qtest" in out.stdout and "dump" in out.stdout


def test_qtest_put_validates_a_small_run():
    out = subprocess.run(
        [sys.executable, "-m", "journaled", "qtest", "--items", "2000", "--threads", "2", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert '"ok": true' in out.stdout
