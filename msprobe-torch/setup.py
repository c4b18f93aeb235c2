"""msprobe-torch's build: the version shared by all four packages, and the optional C per-call path.

The extension (src/msprobe/pytorch/dump/_fast_path.c) builds against Python's
headers only, not torch's; without a C compiler the package installs all
the same and records every call in Python, only slower.
"""

from pathlib import Path

from setuptools import Extension, setup

VERSION = (Path(__file__).resolve().parent.parent / "VERSION").read_text().strip()

# one translation unit: _fast_path.c includes its parts, which the sdist carries and a change to which rebuilds it
FAST_PATH_PARTS = ["text", "torch", "summaries", "entries", "call"]

LANE = Extension(
    "msprobe.pytorch.dump._fast_path",
    ["src/msprobe/pytorch/dump/_fast_path.c"],
    depends=[f"src/msprobe/pytorch/dump/_fast_path_{part}.c" for part in FAST_PATH_PARTS],
    optional=True,
    extra_compile_args=["-O2"],
)

setup(version=VERSION, ext_modules=[LANE])
