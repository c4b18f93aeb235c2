"""FilePool: tensor files written on a few threads, every job tried, failures raised at wait()."""

from __future__ import annotations

import functools
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from msprobe.core.dump.file_pool import FilePool


def _write(array: np.ndarray, path: Path, threads_seen: set[str]) -> None:
    threads_seen.add(threading.current_thread().name)
    np.save(path, array)


@pytest.mark.parametrize("threads", [1, 3])
def test_every_file_is_written_when_wait_returns(tmp_path, threads):
    arrays = [np.full(1000 + index, index, dtype=np.float32) for index in range(40)]
    seen: set[str] = set()
    pool = FilePool(threads)
    for index, array in enumerate(arrays):
        pool.submit(functools.partial(_write, array, tmp_path / f"{index}.npy", seen))
    pool.wait()
    for index, array in enumerate(arrays):
        np.testing.assert_array_equal(np.load(tmp_path / f"{index}.npy"), array)
    if threads == 1:
        assert seen == {threading.current_thread().name}
    else:
        assert all(name.startswith("msprobe-files") for name in seen)
    pool.close()


@pytest.mark.parametrize("threads", [1, 2])
def test_a_failing_file_does_not_stop_the_others_and_is_raised_once(tmp_path, threads):
    (tmp_path / "3.npy").mkdir()  # a directory in the way of one file
    pool = FilePool(threads)
    for index in range(6):
        pool.submit(functools.partial(np.save, tmp_path / f"{index}.npy", np.arange(index + 1)))
    with pytest.raises(OSError):
        pool.wait()
    assert sorted(path.name for path in tmp_path.glob("*.npy") if path.is_file()) == [
        f"{index}.npy" for index in (0, 1, 2, 4, 5)
    ]
    pool.wait()  # the failure was reported: the next batch starts clean
    pool.close()


def test_a_pool_closed_takes_new_jobs(tmp_path):
    pool = FilePool(2)
    pool.submit(functools.partial(np.save, tmp_path / "a.npy", np.ones(3)))
    pool.close()
    pool.submit(functools.partial(np.save, tmp_path / "b.npy", np.zeros(3)))
    pool.wait()
    pool.close()
    assert np.load(tmp_path / "a.npy").sum() == 3 and np.load(tmp_path / "b.npy").sum() == 0


def test_files_submitted_while_the_interpreter_exits_are_still_written(tmp_path):
    """A dump flushed by an exit handler: Python refuses new threads then, so the pool writes inline."""
    script = textwrap.dedent(
        f"""
        import atexit, functools
        import numpy as np
        from msprobe.core.dump.file_pool import FilePool

        pool = FilePool(2)

        def flush():
            for index in range(5):
                pool.submit(functools.partial(np.save, {str(tmp_path)!r} + f"/{{index}}.npy", np.arange(index + 1)))
            pool.wait()

        atexit.register(flush)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    for index in range(5):
        np.testing.assert_array_equal(np.load(tmp_path / f"{index}.npy"), np.arange(index + 1))
