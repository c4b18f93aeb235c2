"""multi_run_ut on one machine: the parent and its helper processes take chunks of APIs from one counter.

The parent has its runner loaded already and starts at once; each helper
joins as soon as its interpreter has imported the framework, which takes
seconds. Once the counter runs out, the parent also runs every chunk not yet
finished, whoever holds it; a chunk's first result is kept and a later one
dropped. So a dump that one process checks faster than a helper starts
costs no more than run_ut, a slow or dead helper never holds the run up,
and on a big dump every process works until the chunks run out.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import queue
from collections.abc import Callable, Iterator
from typing import Any

from msprobe.core.processes import exit_with_parent

logger = logging.getLogger(__name__)

CHUNK = 8  # APIs a process takes at a time: small enough to balance, large enough to keep the counter idle


def _take(counter: Any, lock: Any, total: int) -> int | None:
    with lock:
        index = counter.value
        if index >= total:
            return None
        counter.value = index + 1
        return index


_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@contextlib.contextmanager
def _one_thread_each() -> Iterator[None]:
    """Helpers start with one BLAS/OpenMP thread each: several processes whose thread pools each want every
    core spin against each other (the parent's metrics slowed threefold on two cores without this)."""
    saved = {name: os.environ.get(name) for name in _THREAD_VARIABLES}
    os.environ.update(dict.fromkeys(_THREAD_VARIABLES, "1"))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _helper(
    runner_path: str,
    dump_path: str,
    device: str,
    save: bool,
    chunks: list[list[str]],
    counter: Any,
    lock: Any,
    results: Any,
    parent: int,
) -> None:
    exit_with_parent(parent)
    from msprobe.core.dump.reader import read_dump
    from msprobe.core.precheck.driver import load

    runner = load(runner_path)(read_dump(dump_path), device, save)
    while (index := _take(counter, lock, len(chunks))) is not None:
        results.put((index, [runner.run(name) for name in chunks[index]]))


def run_split(
    runner: Any,
    runner_path: str,
    dump_path: str,
    devices: list[str],
    save: bool,
    todo: list[str],
    helpers: int,
    record: Callable[[Any], None],
) -> None:
    """Check ``todo`` with this process's ``runner`` and ``helpers`` more processes; ``record`` each outcome."""
    chunks = [todo[start : start + CHUNK] for start in range(0, len(todo), CHUNK)]
    context = multiprocessing.get_context("spawn")  # fork after a framework started threads can deadlock
    counter, lock, results = context.Value("i", 0, lock=False), context.Lock(), context.Queue()
    shared = (chunks, counter, lock, results, os.getpid())
    processes = [
        context.Process(
            target=_helper,
            args=(runner_path, dump_path, devices[(h + 1) % len(devices)], save, *shared),
            daemon=True,
            name=f"msprobe-run_ut-{h}",
        )
        for h in range(helpers)
    ]
    with _one_thread_each():
        for process in processes:
            process.start()
    finished: set[int] = set()

    def receive() -> None:
        while True:
            try:
                index, outcomes = results.get_nowait()
            except queue.Empty:
                return
            if index not in finished:  # else the parent ran it too, and first
                finished.add(index)
                for outcome in outcomes:
                    record(outcome)

    def run_here(index: int) -> None:
        receive()
        if index in finished:
            return
        outcomes = [runner.run(name) for name in chunks[index]]
        if index not in finished:
            finished.add(index)
            for outcome in outcomes:
                record(outcome)

    from threadpoolctl import threadpool_limits

    try:
        with threadpool_limits(limits=1):  # this process too: its BLAS threads would spin against the helpers
            while (index := _take(counter, lock, len(chunks))) is not None:
                run_here(index)
            for index in range(len(chunks)):  # what the helpers still hold: whoever finishes first
                run_here(index)
            receive()
    finally:
        for number, process in enumerate(processes):
            if not process.is_alive() and process.exitcode:
                logger.warning("run_ut: helper %d ended early (exit code %s); the APIs it held were run here",
                               number, process.exitcode)  # fmt: skip
            else:
                process.terminate()  # still starting, idle, or on a chunk already done here
        for process in processes:
            process.join(timeout=10)
        results.close()
