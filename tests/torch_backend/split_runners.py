"""Runners for the multi_run_ut tests: the helpers spawned by run_ut import them by dotted path (spawn passes
the parent's sys.path on). Each leaves a mark naming the process that checked an API."""

from __future__ import annotations

import os
import time
from pathlib import Path

from msprobe.pytorch.run_ut import ApiRunner

MARKS = "MSPROBE_TEST_MARKS"  # folder for the marks
PARENT = "MSPROBE_TEST_PARENT"  # the pid of the process that called run_ut
DIE_AT = "MSPROBE_TEST_DIE_AT"  # a helper that reaches this API ends at once


def _mark(name: str) -> None:
    Path(os.environ[MARKS], f"{os.getpid()}-{name}").touch()


class SlowParentRunner(ApiRunner):
    """The calling process takes 50 ms more per API, so the helpers get work once they are up."""

    def run(self, name):
        if str(os.getpid()) == os.environ[PARENT]:
            time.sleep(0.05)
        outcome = super().run(name)
        _mark(name)
        return outcome


class DyingHelperRunner(SlowParentRunner):
    """A helper dies, without a word, when it reaches the API named in MSPROBE_TEST_DIE_AT."""

    def run(self, name):
        if name == os.environ[DIE_AT] and str(os.getpid()) != os.environ[PARENT]:
            os._exit(3)
        return super().run(name)
