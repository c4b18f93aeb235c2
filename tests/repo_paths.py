"""Paths the tests share: the repository, vendored fixtures, test data."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TEST_DATA = REPO_ROOT / "tests" / "data"
REFERENCE_DUMPS = REPO_ROOT / "tests" / "fixtures" / "reference-dumps"
REFERENCE_GRAPHS = REPO_ROOT / "tests" / "fixtures" / "reference-graphs"
