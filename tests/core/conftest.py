"""The core tests' folder is on the import path: a test module may use another's helpers (the varied dump pairs
of test_compare_large)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
