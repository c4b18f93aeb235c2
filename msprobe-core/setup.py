"""msprobe-core's build: the version shared by all four packages, and the optional C kernels.

The kernels (one-pass tensor statistics, see src/msprobe/core/dump/_kernels.c),
the attribute swapping of src/msprobe/core/_attributes.c, the dump.json
scanner (dump/_jsonscan.c), the CSV and xlsx cell text maker (_celltext.c), the compare
row builder (compare/_tablerows.c), the call-stack walker (dump/_frames.c) and the
journal write (dump/_journal.c)
are optional:
without a C compiler the package installs all the same, measures tensors
with the frameworks' own kernels, swaps attributes and writes CSV text in
Python, and compares large dumps in memory.
"""

from pathlib import Path

from setuptools import Extension, setup

VERSION = (Path(__file__).resolve().parent.parent / "VERSION").read_text().strip()

KERNELS = Extension(
    "msprobe.core.dump._kernels",
    ["src/msprobe/core/dump/_kernels.c"],
    optional=True,
    # no fused multiply-add: every platform then rounds the sums alike
    extra_compile_args=["-O3", "-ffp-contract=off", "-Wno-psabi"],
)

# putting wrappers on a class's attributes and off again, as api_patch.py does in Python without it
ATTRIBUTES = Extension("msprobe.core._attributes", ["src/msprobe/core/_attributes.c"], optional=True)

# where the entries of a large dump.json end, so that compare can read it a block of entries at a time
JSONSCAN = Extension("msprobe.core.dump._jsonscan", ["src/msprobe/core/dump/_jsonscan.c"], optional=True)

# the cell text of a large CSV table or xlsx sheet (compare results), without a Python object per cell
CELLTEXT = Extension("msprobe.core._celltext", ["src/msprobe/core/_celltext.c"], optional=True)

# the compare table's rows of the common dump.json entry (tensor summaries only), without Python code per row
TABLEROWS = Extension("msprobe.core.compare._tablerows", ["src/msprobe/core/compare/_tablerows.c"], optional=True)

# DumpWriter.add_journaled's usual case, for msprobe-torch's per-call path to call without touching the writer
JOURNAL = Extension("msprobe.core.dump._journal", ["src/msprobe/core/dump/_journal.c"], optional=True)

# the call stack of each recorded call (stack.json), walked without Python code per call; Python 3.11 and later
FRAMES = Extension("msprobe.core.dump._frames", ["src/msprobe/core/dump/_frames.c"], optional=True)

setup(version=VERSION, ext_modules=[KERNELS, ATTRIBUTES, JSONSCAN, CELLTEXT, TABLEROWS, FRAMES, JOURNAL])
