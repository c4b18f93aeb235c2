"""Where offline jobs run: this machine's worker processes (``local``) or a Ray cluster (``ray``).

A job is a picklable function applied to independent items (a rank pair, a
step/rank folder); each reads its inputs by path, so on a cluster the paths
must be on storage every node sees. Results come back in the items' order
whatever order they finish in, and a progress bar counts them. Ray is an
optional extra imported only when chosen; its own task retries take over
the items of a worker or node that is lost.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import as_completed
from dataclasses import dataclass
from typing import Any, TypeVar

from msprobe.core.errors import UsageError
from msprobe.core.processes import worker_pool

logger = logging.getLogger(__name__)

ENGINES = ("local", "ray")
RAY_CONNECT_SECONDS = 5.0
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
_joined: str | None = None  # the address this process joined Ray with ("" for a cluster of its own); None: not us


def run_jobs(
    function: Callable[[Item], Result],
    items: Sequence[Item],
    engine: Engine = LOCAL,
    what: str = "jobs",
    on_result: Callable[[int, Result], Any] | None = None,
) -> list[Result]:
    """``[function(item) for item in items]``, spread over ``engine``; the first failure is raised.
    ``on_result(index, result)`` sees each result as it arrives (to write it at once, say)."""
    if not items:
        return []
    results: list[Any] = [None] * len(items)

    def arrived(index: int, result: Any) -> None:
        results[index] = result
        if on_result is not None:
            on_result(index, result)

    if engine.name == "ray":
        _run_on_ray(function, items, engine, what, arrived)
        return results
    workers = min(engine.workers or min(os.cpu_count() or 1, 8), len(items))
    with _progress(len(items), what) as bar:
        if workers == 1:  # in this process: what each job is doing is noted beside the bar
            _BARS.append(bar)
            try:
                for index, item in enumerate(items):
                    arrived(index, function(item))
                    bar.update()
            finally:
                _BARS.remove(bar)
            return results
        with worker_pool(workers) as pool:
            futures = {pool.submit(function, item): index for index, item in enumerate(items)}
            for future in as_completed(futures):
                arrived(futures[future], future.result())
                bar.update()
    return results


_BARS: list[Any] = []  # the progress bars of this process, innermost last


def note(doing: str) -> None:
    """What the work under way is doing now, beside its progress bar on a terminal (``reading the dumps``), so
    a long step that has no count to show still shows what it is at; nothing where no bar is shown."""
    if _BARS:
        _BARS[-1].set_postfix_str(doing, refresh=True)


@contextlib.contextmanager
def activity(what: str, doing: str = "") -> Iterator[None]:
    """A status line on a terminal, for work with no count: ``what``, then ``doing`` and each :func:`note`,
    and the time taken so far; nothing in a pipe or a log file (as every bar). Under a bar already shown,
    ``doing`` is noted beside it instead."""
    if _BARS:
        note(doing or what)
        yield
        return
    from tqdm import tqdm

    line = tqdm(total=None, desc=what, disable=None, leave=False, bar_format="{desc}{postfix} [{elapsed}]")
    _BARS.append(line)
    try:
        note(doing)
        yield
    finally:
        _BARS.remove(line)
        line.close()


def _progress(total: int, what: str):
    from tqdm import tqdm

    return tqdm(total=total, unit=what.rstrip("s") or "job", desc=what, disable=None, leave=False)


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError("--engine ray needs Ray: pip install 'msprobe-core[ray]'") from None
    return ray


def _guard_own_cluster(address: str | None) -> None:
    """Ray's servers listen on every interface, so a cluster started for this run asks for a token of its
    own (Ray 2.52 and later; older versions ignore it). Ray reads the setting at import, and the cluster's
    processes inherit it from this one; a choice the user made in ``RAY_AUTH_MODE`` stands."""
    if address or "RAY_AUTH_MODE" in os.environ:
        return
    if sys.modules.get("ray") is not None:
        logger.warning("ray was imported before msprobe could ask for a token: the cluster it starts takes "
                       "work from anyone who can reach this machine; set RAY_AUTH_MODE=token to close it")  # fmt: skip
        return
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)


def _check_reachable(address: str | None) -> None:
    """A head that does not answer makes Ray wait for minutes; a plain host:port is tried first, briefly."""
    if not address or "://" in address or address in ("auto", "local"):
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"Ray address '{address}' is not host:port")
    try:
        socket.create_connection((host, int(port)), timeout=RAY_CONNECT_SECONDS).close()
    except OSError as exc:
        raise UsageError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}") from None


def call(function: Callable[[Item], Result], item: Item) -> Result:
    """What a Ray task runs: the job's function travels by reference, so any picklable callable serves."""
    return function(item)


def _run_on_ray(
    function: Callable[[Item], Result],
    items: Sequence[Item],
    engine: Engine,
    what: str,
    arrived: Callable[[int, Any], None],
) -> None:
    address = engine.address or os.environ.get("RAY_ADDRESS") or None
    _check_reachable(address)
    loaded = sys.modules.get("ray")
    if loaded is None or not loaded.is_initialized():
        _guard_own_cluster(address)
    ray = import_ray()
    global _joined
    if ray.is_initialized() and _joined is not None and _joined != (address or ""):
        ray.shutdown()  # this process joined another cluster for an earlier job: the one asked for now counts
    if not ray.is_initialized():
        try:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False, include_dashboard=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise UsageError(f"cannot reach the Ray cluster at {address or 'this machine'}: {exc}") from None
        _joined = address or ""
    logger.info("ray: %d CPUs in the cluster", int(ray.cluster_resources().get("CPU", 0)))
    remote = ray.remote(max_retries=RAY_RETRIES, retry_exceptions=False)(call)
    pending = {remote.remote(function, item): index for index, item in enumerate(items)}
    with _progress(len(items), what) as bar:
        waiting = list(pending)
        while waiting:
            done, waiting = ray.wait(waiting, num_returns=1)
            for reference in done:
                try:
                    result = ray.get(reference)
                except ray.exceptions.RayTaskError as exc:  # the job's own error, as the local engine raises it
                    cause = getattr(exc, "cause", None)
                    raise (cause if isinstance(cause, Exception) else exc) from None
                arrived(pending[reference], result)
                bar.update()


def click_options(function: Callable) -> Callable:
    """``--engine local|ray`` and ``--ray-address`` for a click command; it builds its Engine with ``engine_of``."""
    import click

    function = click.option(
        "--ray-address",
        "ray_address",
        default=None,
        metavar="ADDRESS",
        help="Ray cluster to join, host:port (default: RAY_ADDRESS, else a cluster started on this machine).",
    )(function)
    return click.option(
        "--engine",
        "engine",
        type=click.Choice(ENGINES),
        default="local",
        show_default=True,
        help="Where the jobs run: this machine's processes, or a Ray cluster (pip install 'msprobe-core[ray]').",
    )(function)


def engine_of(engine: str, ray_address: str | None, workers: int | None = None) -> Engine:
    return Engine(engine, workers, ray_address)
