import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture
def qdir(tmp_path):
    """A fresh, empty queue directory."""
    d = tmp_path / "q"
    return str(d)
