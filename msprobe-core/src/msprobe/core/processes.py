"""Worker processes that do not outlive the process that started them.

A ``ProcessPoolExecutor`` whose parent is killed outright (SIGKILL, the OOM
killer) leaves its workers waiting on a queue forever. Pools made here give
each worker a watcher thread that ends it once its parent is gone.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor

PARENT_CHECK_SECONDS = 1.0


def exit_with_parent(parent: int) -> None:
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_SECONDS)
        os._exit(0)  # the parent is gone: nobody waits for this worker's results

    threading.Thread(target=watch, name="msprobe-parent-watch", daemon=True).start()


def worker_pool(workers: int, start_method: str = "spawn") -> ProcessPoolExecutor:
    """A process pool (spawn by default: fork after a framework started threads can deadlock)."""
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context(start_method),
        initializer=exit_with_parent,
        initargs=(os.getpid(),),
    )
