"""Where things are, for tests at any depth of tests/: the project root and the tests folder."""

import os

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS)
