"""Where offline jobs run: this machine's worker processes (``local``) or a Ray cluster (``ray``).

A job is a picklable function applied to independent items (a rank pair, a
step/rank folder); each reads its inputs by path, so on a cluster the paths
must be on storage every node sees. Results come back in the items' order
whatever order they finish in, and a progress bar counts them. Ray is an
optional extra imported only when chosen; its own task retries take over
the items of a worker or node that is lost.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import as_completed
from dataclasses import dataclass
from typing import Any, TypeVar

from msprobe.core.errors import UsageError
from msprobe.core.processes import worker_pool

logger = logging.getLogger(__name__)

ENGINES = ("local", "ray")
RAY_RETRIES = 3  # attempts after the first when a worker process or node dies under a task
Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass(frozen=True)
class Engine:
    """``workers``: local processes (None: one per CPU, at most 8); ``address``: the Ray cluster to join
    (None: ``RAY_ADDRESS``, else a cluster on this machine started for the run)."""

    name: str = "local"
    workers: int | None = None
    address: str | None = None

    def __post_init__(self) -> None:
        if self.name not in ENGINES:
            raise UsageError(f"engine '{self.name}' is unknown; choose one of {', '.join(ENGINES)}")
        if self.workers is not None and self.workers < 1:
            raise UsageError(f"the number of workers must be at least 1, not {self.workers}")


LOCAL = Engine()


def run_jobs(
    function: Callable[[Item], Result], items: Sequence[Item], engine: Engine = LOCAL, what: str = "jobs"
) -> list[Result]:
    """``[function(item) for item in items]``, spread over ``engine``; the first failure is raised."""
    if not items:
        return []
    if engine.name == "ray":
        return _run_on_ray(function, items, engine, what)
    workers = min(engine.workers or min(os.cpu_count() or 1, 8), len(items))
    if workers == 1:
        with _progress(len(items), what) as bar:
            results = []
            for item in items:
                results.append(function(item))
                bar.update()
            return results
    results: list[Any] = [None] * len(items)
    with worker_pool(workers) as pool, _progress(len(items), what) as bar:
        futures = {pool.submit(function, item): index for index, item in enumerate(items)}
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            bar.update()
    return results


def _progress(total: int, what: str):
    from tqdm import tqdm

    return tqdm(total=total, unit=what.rstrip("s") or "job", desc=what, disable=None, leave=False)


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError("--engine ray needs Ray: pip install 'msprobe-core[ray]'") from None
    return ray


def _run_on_ray(function: Callable[[Item], Result], items: Sequence[Item], engine: Engine, what: str) -> list[Result]:
    ray = import_ray()
    address = engine.address or os.environ.get("RAY_ADDRESS") or None
    if not ray.is_initialized():
        try:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False, include_dashboard=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise UsageError(f"cannot reach the Ray cluster at {address or 'this machine'}: {exc}") from None
    logger.info("ray: %d CPUs in the cluster", int(ray.cluster_resources().get("CPU", 0)))
    remote = ray.remote(max_retries=RAY_RETRIES, retry_exceptions=False)(function)
    pending = {remote.remote(item): index for index, item in enumerate(items)}
    results: list[Any] = [None] * len(items)
    with _progress(len(items), what) as bar:
        waiting = list(pending)
        while waiting:
            done, waiting = ray.wait(waiting, num_returns=1)
            for reference in done:
                try:
                    results[pending[reference]] = ray.get(reference)
                except ray.exceptions.RayTaskError as exc:  # the job's own error, as the local engine raises it
                    cause = getattr(exc, "cause", None)
                    raise (cause if isinstance(cause, Exception) else exc) from None
                bar.update()
    return results
