"""Tensor files written on a few threads at once.

A tensor dump writes hundreds of files per step, and creating a file costs
more kernel time than copying its data. That work runs without Python's GIL, so a few
threads overlap it with each other and with whatever the dump computes in
the meantime (statistics). ``wait()`` returns once every file is written,
so a dump that waits before journaling its entries never lists a file that
is not there.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

_MAX_THREADS = 4


def default_threads() -> int:
    return max(1, min(_MAX_THREADS, os.cpu_count() or 1))


class FilePool:
    """Runs file-writing jobs on ``threads`` threads (inline with one); ``wait()`` raises the last failure."""

    def __init__(self, threads: int | None = None):
        self.threads = default_threads() if threads is None else max(1, threads)
        self._executor: ThreadPoolExecutor | None = None
        self._running: list[Future] = []
        self._failure: BaseException | None = None

    def submit(self, write: Callable[[], None]) -> None:
        """``write`` must not touch the framework (only numpy and files): it may run on another thread."""
        if self.threads > 1:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.threads, thread_name_prefix="msprobe-files")
            try:
                self._running.append(self._executor.submit(write))
                return
            except RuntimeError:  # the interpreter is exiting (a dump flushed at exit): no new threads
                pass
        try:
            write()
        except Exception as exc:
            self._failure = exc

    def wait(self) -> None:
        """Block until every submitted file is written; then raise the last failure, if any (each job is tried)."""
        running, self._running = self._running, []
        failure, self._failure = self._failure, None
        for future in running:
            exc = future.exception()
            if exc is not None:
                failure = exc
        if failure is not None:
            raise failure

    def close(self) -> None:
        """Wait for the files still being written and let the threads go (a later submit starts new ones)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
