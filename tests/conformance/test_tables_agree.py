"""The tables msprobe ships from the reference's behaviour are the reference's own, read from its installed
package: the precision standards and thresholds run_ut judges by, and the MindSpore-to-PyTorch API table.

The precision tests read their boundaries from msprobe's copies; this keeps those copies the reference's.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import reference_python

OURS = Path(__file__).resolve().parents[2] / "msprobe-core" / "src" / "msprobe" / "core" / "data"
THEIRS = {  # ours -> where the reference keeps it, inside its msprobe package
    "api_precision_standard.yaml": "pytorch/api_accuracy_checker/compare/api_precision_standard.yaml",
    "api_precision_threshold.yaml": "pytorch/api_accuracy_checker/compare/api_precision_threshold.yaml",
    "ms_to_pt_api.yaml": "mindspore/compare/ms_to_pt_api.yaml",
}


@pytest.fixture(scope="module")
def reference_package() -> Path:
    code = "import json, pathlib, importlib.util; print(json.dumps(importlib.util.find_spec('msprobe').origin))"
    found = subprocess.run([reference_python(), "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return Path(json.loads(found.stdout)).parent


@pytest.mark.parametrize("ours", sorted(THEIRS))
def test_our_table_is_the_reference_s(reference_package, ours):
    theirs = reference_package / THEIRS[ours]
    assert yaml.safe_load((OURS / ours).read_text()) == yaml.safe_load(theirs.read_text()), ours
