"""The scale tests use the benchmark's synthetic multi-rank dumps (bench/synthetic_ranks.py)."""

import sys

from repo_paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
sys.path.insert(0, str(REPO_ROOT / "tests" / "scale"))  # ray_jobs, which the cluster's workers import too
