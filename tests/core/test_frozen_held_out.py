"""The frozen held-out set of the diagnosis bench is never edited: its score stands for faults no rule was fitted
to only while its faults stay as they were first written down. A change here must be a new set, not an edit."""

import hashlib

from repo_paths import REPO_ROOT

FROZEN_TEXT_SHA256 = "6ce61f91b3405b0909bcb482555501f0ed77153cd3fc84bf72eaf4881ad32296"


def test_the_frozen_held_out_set_is_as_first_written():
    source = (REPO_ROOT / "bench" / "diagnosis_faults.py").read_text(encoding="utf-8")
    start = source.index("# -- the frozen held-out set")
    end = source.index("# end of the frozen held-out set")
    assert hashlib.sha256(source[start:end].encode()).hexdigest() == FROZEN_TEXT_SHA256
