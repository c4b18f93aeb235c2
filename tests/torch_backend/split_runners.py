"""Runners for the multi_run_ut tests: the helpers spawned by run_ut import them by dotted path (spawn passes
the parent's sys.path on). Each leaves a mark naming the process that checked an API."""

from __future__ import annotations

import os
import time
from pathlib import Path

from msprobe.pytorch.precheck.run_ut import ApiRunner

MARKS = "MSPROBE_TEST_MARKS"  # folder for the marks
PARENT = "MSPROBE_TEST_PARENT"  # the pid of the process that called run_ut
DIE_AT = "MSPROBE_TEST_DIE_AT"  # a helper that reaches this API ends at once


def _mark(name: str) -> None:
    Path(os.environ[MARKS], f"{os.getpid()}-{name}").touch()


def _a_helper_has_checked() -> bool:
    parent = os.environ[PARENT]
    return any(not mark.name.startswith(f"{parent}-") for mark in Path(os.environ[MARKS]).iterdir())


class SlowParentRunner(ApiRunner):
    """The calling process waits until a helper has checked an API (a helper takes seconds to start and
    import torch on a busy machine, and the parent alone would finish first), then takes 50 ms more per API,
    so the helpers share the work however loaded the machine is."""

    def run(self, name):
        if str(os.getpid()) == os.environ[PARENT]:
            deadline = time.monotonic() + 300
            while not _a_helper_has_checked() and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.05)
        outcome = super().run(name)
        _mark(name)
        return outcome


class DyingHelperRunner(SlowParentRunner):
    """A helper dies, without a word, when it reaches the API named in MSPROBE_TEST_DIE_AT (``*``: the first
    API it runs, which it always gets: the parent waits for a helper's first mark before it runs any)."""

    def run(self, name):
        if os.environ[DIE_AT] in (name, "*") and str(os.getpid()) != os.environ[PARENT]:
            _mark(f"died-at-{name}")  # the parent, waiting for a helper's first mark, goes on
            os._exit(3)
        return super().run(name)
