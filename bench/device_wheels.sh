#!/bin/sh
# The wheels a lent GPU machine lacks to run `nox -s device` (its Python 3.12 holds torch but not msprobe's
# dependencies, and it has no network): downloaded here into .whl/, which the device tool carries.
set -e
cd "$(dirname "$0")/.."
rm -rf .whl
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    -d .whl pydantic orjson xlsxwriter zlib-ng openpyxl nox
du -sh .whl
