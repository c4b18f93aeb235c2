"""api_precision_compare: judge a device's run_ut details against another device's (NPU vs GPU).

Both files compare their device with the same kind of CPU benchmark; the
device under test passes an API when its errors are not much worse than the
reference device's, by the algorithm the precision standards assign to the
API (benchmark ratios, absolute thresholds, binary consistency, ULP,
thousandth). Written to api_precision_compare_result_{timestamp}.csv and
api_precision_compare_details_{timestamp}.csv with the reference's columns.
"""

from __future__ import annotations

import csv
import math
import time
from dataclasses import dataclass
from pathlib import Path

from msprobe.core import spreadsheet
from msprobe.core.errors import DataFileError
from msprobe.core.files import make_dir, new_file
from msprobe.core.precheck.metrics import DETAIL_COLUMNS, ERROR, NA, PASS, RESULT_COLUMNS, WARNING, overall
from msprobe.core.precheck.results import api_of_detail
from msprobe.core.precheck.standards import ABSOLUTE, ALGORITHM_NAMES, BENCHMARK, BINARY, THOUSANDTH, ULP, standard_for

COMPARE_DETAIL_COLUMNS = [
    "API Name",
    "小值域错误比值",
    "小值域错误判定结果",
    "均方根误差比值",
    "均方根误差判定结果",
    "相对误差最大值比值",
    "相对误差最大值判定结果",
    "相对误差平均值比值",
    "相对误差平均值判定结果",
    "误差均衡性比值",
    "误差均衡性判定结果",
    "inf/nan错误率",
    "inf/nan判定结果",
    "相对误差错误率",
    "相对误差判定结果",
    "绝对误差错误率",
    "绝对误差判定结果",
    "二进制一致错误率",
    "二进制一致错误率判定结果",
    "ULP误差平均值",
    "ULP误差大于阈值占比",
    "ULP误差大于阈值占比比值",
    "ULP误差判定结果",
    "双千指标",
    "双千指标判定结果",
    "比对结果",
    "比对算法",
    "Message",
]

# benchmark-standard metric -> (ratio column, verdict column, largest allowed ratio, counted in the result)
BENCHMARK_RATIOS = {
    "小值域错误占比": ("小值域错误比值", "小值域错误判定结果", 2.0, True),
    "均方根误差": ("均方根误差比值", "均方根误差判定结果", 2.0, True),
    "相对误差最大值": ("相对误差最大值比值", "相对误差最大值判定结果", 10.0, True),
    "相对误差平均值": ("相对误差平均值比值", "相对误差平均值判定结果", 2.0, True),
    "误差均衡性": ("误差均衡性比值", "误差均衡性判定结果", 2.0, False),
}


def _number(value: str | None) -> float | None:
    if value in (None, "", NA):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _ratio(npu: float, gpu: float) -> float:
    if gpu == 0:
        return 1.0 if npu == 0 else math.inf
    return abs(npu) / abs(gpu)


def read_details(path: str | Path) -> dict[str, dict[str, str]]:
    file = Path(path)
    try:
        with open(file, encoding="utf-8-sig", newline="") as handle:
            reader = csv.DictReader(handle)
            if reader.fieldnames != DETAIL_COLUMNS:
                raise DataFileError(file, "not an accuracy_checking_details file (its header differs)")
            return {row["API Name"]: row for row in reader}
    except FileNotFoundError:
        raise DataFileError(file, "not found") from None


@dataclass
class Judged:
    row: dict[str, object]
    status: str
    failed: list[str]


def judge_row(name: str, npu: dict[str, str], gpu: dict[str, str]) -> Judged:
    row: dict[str, object] = {column: NA for column in COMPARE_DETAIL_COLUMNS}
    row["API Name"] = name
    failed: list[str] = []
    standard = BINARY if _number(npu.get("二进制一致错误率")) is not None else standard_for(name.split(".")[1])
    if npu.get("Status") == "SKIP" or gpu.get("Status") == "SKIP":
        row.update({"比对结果": "SKIP", "比对算法": NA, "Message": npu.get("Message") or gpu.get("Message") or ""})
        return Judged(row, "SKIP", [])
    if standard == BINARY:
        rate = _number(npu.get("二进制一致错误率")) or 0.0
        row["二进制一致错误率"] = rate
        row["二进制一致错误率判定结果"] = PASS if rate == 0 else ERROR
    elif standard == ABSOLUTE:
        for metric, verdict in (
            ("inf/nan错误率", "inf/nan判定结果"),
            ("相对误差错误率", "相对误差判定结果"),
            ("绝对误差错误率", "绝对误差判定结果"),
        ):
            value = _number(npu.get(metric))
            row[metric] = NA if value is None else value
            row[verdict] = NA if value is None else (PASS if value == 0 else ERROR)
    elif standard == ULP:
        mean, ratio = _number(npu.get("ULP误差平均值")), _number(npu.get("ULP误差大于阈值占比"))
        gpu_ratio = _number(gpu.get("ULP误差大于阈值占比"))
        row["ULP误差平均值"], row["ULP误差大于阈值占比"] = mean, ratio
        if ratio is not None and gpu_ratio is not None:
            row["ULP误差大于阈值占比比值"] = _ratio(ratio, gpu_ratio)
            half = npu.get("DEVICE Dtype") in ("torch.float16", "torch.bfloat16")
            ok = ratio < 0.001 or ratio < gpu_ratio if half else (mean or 0) < 64 or ratio < 0.05 or ratio < gpu_ratio
            row["ULP误差判定结果"] = PASS if ok else ERROR
    elif standard == THOUSANDTH:
        value = _number(npu.get("双千指标"))
        row["双千指标"] = NA if value is None else value
        row["双千指标判定结果"] = NA if value is None else (PASS if value > 0.999 else ERROR)
    else:
        for metric, (ratio_column, verdict_column, limit, _counted) in BENCHMARK_RATIOS.items():
            a, b = _number(npu.get(metric)), _number(gpu.get(metric))
            if a is None or b is None:
                continue
            ratio = _ratio(a, b)
            row[ratio_column] = ratio
            row[verdict_column] = PASS if ratio <= limit else ERROR
    uncounted = {verdict for _ratio_column, verdict, _limit, counted in BENCHMARK_RATIOS.values() if not counted}
    for column in COMPARE_DETAIL_COLUMNS:
        if column.endswith("判定结果") and row[column] == ERROR and column not in uncounted:
            failed.append(column.replace("判定结果", ""))
    status = ERROR if failed else PASS
    row["比对结果"] = status
    row["比对算法"] = ALGORITHM_NAMES.get(standard, ALGORITHM_NAMES[BENCHMARK])
    row["Message"] = ("failed: " + ", ".join(failed)) if failed else ""
    return Judged(row, status, failed)


def api_precision_compare(npu_csv: str | Path, gpu_csv: str | Path, output_dir: str | Path) -> tuple[Path, Path, int]:
    """Write the two result files; returns their paths and the number of APIs in error."""
    npu, gpu = read_details(npu_csv), read_details(gpu_csv)
    folder = make_dir(Path(output_dir))
    stamp = time.strftime("%Y%m%d%H%M%S")
    details_path = folder / f"api_precision_compare_details_{stamp}.csv"
    result_path = folder / f"api_precision_compare_result_{stamp}.csv"
    per_api: dict[str, dict[str, list[str]]] = {}
    messages: dict[str, list[str]] = {}
    with new_file(details_path, "w", encoding="utf-8-sig", newline="") as handle:
        writer = spreadsheet.writer(handle)
        writer.writerow(COMPARE_DETAIL_COLUMNS)
        for name, npu_row in npu.items():
            gpu_row = gpu.get(name)
            if gpu_row is None:
                judged = Judged(
                    {
                        **dict.fromkeys(COMPARE_DETAIL_COLUMNS, NA),
                        "API Name": name,
                        "比对结果": "SKIP",
                        "Message": "no row of this name in the GPU file",
                    },
                    "SKIP",
                    [],
                )
            else:
                judged = judge_row(name, npu_row, gpu_row)
            writer.writerow([judged.row[column] for column in COMPARE_DETAIL_COLUMNS])
            api = api_of_detail(name)
            direction = "backward" if ".backward." in name else "forward"
            per_api.setdefault(api, {"forward": [], "backward": []})[direction].append(judged.status)
            if judged.failed:
                messages.setdefault(api, []).append(f"{name}: {', '.join(judged.failed)}")
    errors = 0
    with new_file(result_path, "w", encoding="utf-8-sig", newline="") as handle:
        writer = spreadsheet.writer(handle)
        writer.writerow(RESULT_COLUMNS)
        for api, statuses in per_api.items():
            forward, backward = overall(statuses["forward"]), overall(statuses["backward"])
            errors += ERROR in (forward, backward)
            writer.writerow([api, forward, backward, "; ".join(messages.get(api, []))])
    return result_path, details_path, errors


__all__ = ["COMPARE_DETAIL_COLUMNS", "WARNING", "api_precision_compare"]
