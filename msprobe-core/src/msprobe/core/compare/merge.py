"""``merge_result``: one sheet per metric, one column per rank, for chosen APIs.

Reads the per-rank results that ``compare`` wrote for a multi-rank run
(``compare_result_rank{N}_{timestamp}.xlsx``, or their CSV twins) and a YAML
config naming the APIs and metrics, as the reference does.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from msprobe.core.compare.mapping import read_yaml
from msprobe.core.compare.report import timestamp
from msprobe.core.compare.tables import STATISTICS_COLUMNS, STATISTICS_METRICS, TENSOR_COLUMNS, TENSOR_METRICS
from msprobe.core.errors import DataFileError
from msprobe.core.files import make_dir, new_file
from msprobe.core.jobs import Engine, run_jobs
from msprobe.core.spreadsheet import safe_table

_RANK_FILE = re.compile(r"^compare_result_rank(?P<rank>\d+)_\d+\.(?P<suffix>xlsx|csv)$")
STATISTICS_INDEX = STATISTICS_METRICS
TENSOR_INDEX = TENSOR_METRICS


def _rank_files(input_dir: Path) -> dict[int, Path]:
    if not input_dir.is_dir():
        raise DataFileError(input_dir, "not a folder")
    files: dict[int, Path] = {}
    for path in sorted(input_dir.iterdir()):
        match = _RANK_FILE.match(path.name)
        if match is None:
            continue
        rank = int(match["rank"])
        if rank not in files or (match["suffix"] == "csv"):  # the CSV twin reads faster
            files[rank] = path
    if not files:
        raise DataFileError(input_dir, "holds no compare_result_rank{N}_{timestamp}.xlsx files")
    return dict(sorted(files.items()))


def _read_rank_table(job: tuple[Path, list[str]]) -> pd.DataFrame:
    """One rank's result, only the rows of the chosen APIs (a job: the ranks' files are read in parallel)."""
    path, apis = job
    try:
        table = pd.read_csv(path) if path.suffix == ".csv" else pd.read_excel(path)
    except Exception as exc:
        raise DataFileError(path, f"cannot be read as a compare result ({exc.__class__.__name__})") from None
    if "NPU Name" not in table.columns:
        raise DataFileError(path, "has no 'NPU Name' column")
    return table[table["NPU Name"].astype(str).map(lambda n: _matches(n, apis))]


def _matches(name: str, apis: list[str]) -> bool:
    return any(name == api or name.startswith(api + ".") for api in apis)


def merge_results(
    input_dir: str | Path, output_dir: str | Path, config_path: str | Path, engine: Engine | None = None
) -> Path:
    config = read_yaml(config_path, "merge_result config")
    if not isinstance(config, dict) or not config.get("api"):
        raise DataFileError(config_path, "api: name at least one API or module to merge")
    apis = [str(api) for api in config["api"]]
    files = _rank_files(Path(input_dir))
    read = run_jobs(_read_rank_table, [(path, apis) for path in files.values()], engine or Engine(workers=1), "ranks")
    tables = dict(zip(files, read))
    first = next(iter(tables.values()))
    tensor_mode = "Cosine" in first.columns
    allowed = TENSOR_INDEX if tensor_mode else STATISTICS_INDEX
    indexes = [str(i) for i in (config.get("compare_index") or allowed)]
    wrong = [i for i in indexes if i not in allowed]
    if wrong:
        mode = "tensor" if tensor_mode else "statistics"
        raise DataFileError(config_path, f"compare_index {wrong} is not a {mode}-mode metric ({', '.join(allowed)})")
    output = make_dir(Path(output_dir)) / f"multi_ranks_compare_merge_{timestamp()}.xlsx"
    with new_file(output) as handle, pd.ExcelWriter(handle, engine="xlsxwriter") as writer:
        for index in indexes:
            columns = {}
            for rank, chosen in tables.items():
                columns[f"rank{rank}"] = chosen.set_index("NPU Name")[index]
            merged = pd.DataFrame(columns)
            merged.index.name = "NPU Name"
            safe_table(merged.reset_index()).to_excel(writer, sheet_name=index[:31], index=False)
    return output


__all__ = ["STATISTICS_COLUMNS", "TENSOR_COLUMNS", "merge_results"]
