"""The metrics of accuracy_checking_details and the pass/warning/error rules.

Inputs are numpy arrays: ``bench`` from the high-precision benchmark
(float64 for floating outputs), ``device`` from the tested run, and the
tested dtype as the framework names it (``torch.float16``...). Status
follows the reference: cosine > 0.99, then max absolute error < 0.001, then
the hundredth/thousandth/ten-thousandth ratios by dtype; exact comparison
for integer/bool outputs and for APIs of the binary-consistency standard.
The ULP, small-value and error-rate columns feed api_precision_compare.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from msprobe.core.precheck.standards import BINARY, SMALL_VALUE, SMALL_VALUE_ATOL, absolute_thresholds, standard_for

NA = "N/A"
PASS, WARNING, ERROR, SKIP = "pass", "warning", "error", "SKIP"

DETAIL_COLUMNS = [
    "API Name",
    "Bench Dtype",
    "DEVICE Dtype",
    "Shape",
    "余弦相似度",
    "最大绝对误差",
    "双百指标",
    "双千指标",
    "双万指标",
    "二进制一致错误率",
    "误差均衡性",
    "均方根误差",
    "小值域错误占比",
    "相对误差最大值",
    "相对误差平均值",
    "inf/nan错误率",
    "相对误差错误率",
    "绝对误差错误率",
    "ULP误差最大值",
    "ULP误差平均值",
    "ULP误差大于阈值占比",
    "Status",
    "Message",
]
RESULT_COLUMNS = ["API Name", "Forward Test Success", "Backward Test Success", "Message"]

_FLOATS = ("torch.float16", "torch.bfloat16", "torch.float32", "torch.float64")
_MANTISSA = {"torch.float16": 10, "torch.bfloat16": 7, "torch.float32": 23, "torch.float64": 52}
_MIN_EXPONENT = {"torch.float16": -14, "torch.bfloat16": -126, "torch.float32": -126, "torch.float64": -1022}
_EPSILON = {"torch.float16": 2**-10, "torch.bfloat16": 2**-7, "torch.float32": 2**-23, "torch.float64": 2**-52}
ULP_THRESHOLD = {"torch.float16": 1, "torch.bfloat16": 1, "torch.float32": 32, "torch.float64": 32}


@dataclass
class Detail:
    """One row of accuracy_checking_details."""

    name: str
    bench_dtype: str
    device_dtype: str
    shape: str
    values: dict[str, object] = field(default_factory=dict)
    status: str = PASS
    message: str = ""

    def row(self) -> list[object]:
        metrics = [self.values.get(column, NA) for column in DETAIL_COLUMNS[4:-2]]
        return [self.name, self.bench_dtype, self.device_dtype, self.shape, *metrics, self.status, self.message]


def _ratio(mask: np.ndarray, within: np.ndarray | None = None) -> object:
    if within is not None:
        total = int(within.sum())
        return NA if total == 0 else float((mask & within).sum() / total)
    return float(mask.mean()) if mask.size else NA


def float_metrics(api: str, bench: np.ndarray, device: np.ndarray, dtype: str) -> dict[str, object]:
    b = bench.astype(np.float64).ravel()
    d = device.astype(np.float64).ravel()
    values: dict[str, object] = {}
    finite = np.isfinite(b) & np.isfinite(d)
    values["inf/nan错误率"] = float(
        np.mean((np.isnan(b) != np.isnan(d)) | (np.isinf(b) & (b != d)) | (np.isinf(d) & (b != d)))
    )
    b, d = b[finite], d[finite]
    if b.size == 0:
        return values
    diff = np.abs(d - b)
    nb, nd = np.linalg.norm(b), np.linalg.norm(d)
    values["余弦相似度"] = (
        1.0 if nb == 0 and nd == 0 else (NA if nb == 0 or nd == 0 else float(np.dot(b, d) / (nb * nd)))
    )
    values["最大绝对误差"] = float(diff.max())
    relative = diff / (np.abs(b) + _EPSILON.get(dtype, 2**-23))
    values["双百指标"] = float(np.mean(relative < 0.01))
    values["双千指标"] = float(np.mean(relative < 0.001))
    values["双万指标"] = float(np.mean(relative < 0.0001))
    values["误差均衡性"] = float(np.mean(np.sign(d - b)))
    values["均方根误差"] = float(np.sqrt(np.mean((d - b) ** 2)))
    small_value, small_atol = SMALL_VALUE.get(dtype, 2**-20), SMALL_VALUE_ATOL.get(dtype, 2**-30)
    small = np.abs(b) < small_value
    values["小值域错误占比"] = _ratio(diff > small_atol, small)
    normal = ~small
    if normal.any():
        values["相对误差最大值"] = float(relative[normal].max())
        values["相对误差平均值"] = float(relative[normal].mean())
    rtol, abs_small_value, abs_small_atol = absolute_thresholds(api, dtype)
    abs_small = np.abs(b) < abs_small_value
    values["相对误差错误率"] = _ratio(relative > rtol, ~abs_small)
    values["绝对误差错误率"] = _ratio(diff > abs_small_atol, abs_small)
    if dtype in _MANTISSA:
        exponent = np.floor(np.log2(np.maximum(np.abs(b), 2.0 ** _MIN_EXPONENT[dtype])))
        ulp = np.exp2(exponent - _MANTISSA[dtype])
        ulp_error = diff / ulp
        values["ULP误差最大值"] = float(ulp_error.max())
        values["ULP误差平均值"] = float(ulp_error.mean())
        values["ULP误差大于阈值占比"] = float(np.mean(ulp_error > ULP_THRESHOLD[dtype]))
    return values


def binary_error_rate(bench: np.ndarray, device: np.ndarray) -> float:
    if bench.shape != device.shape:
        return 1.0
    if bench.size == 0:
        return 0.0
    equal = (bench == device) | (np.isnan(bench.astype(np.float64)) & np.isnan(device.astype(np.float64)))
    return float(1.0 - np.mean(equal))


def judge(detail: Detail, api: str) -> None:
    """Set status and message from the metrics, by the reference's rules."""
    values = detail.values
    if "二进制一致错误率" in values:
        detail.status = PASS if values["二进制一致错误率"] == 0 else ERROR
        if detail.status == ERROR:
            detail.message = "binary consistency failed"
        return
    if values.get("inf/nan错误率", 0) not in (0, 0.0, NA):
        detail.status, detail.message = ERROR, "inf/nan do not match the benchmark"
        return
    cosine, max_abs = values.get("余弦相似度", NA), values.get("最大绝对误差", NA)
    if NA in (cosine, max_abs):
        detail.status = PASS if max_abs in (NA, 0.0) else ERROR
        return
    if cosine <= 0.99:
        detail.status, detail.message = ERROR, "cosine similarity <= 0.99"
        return
    if max_abs < 0.001:
        detail.status = PASS
        return
    half = canonical_dtype(detail.device_dtype) in ("torch.float16", "torch.bfloat16")
    strict, loose = ("双百指标", "双千指标") if half else ("双千指标", "双万指标")
    limit = {"双百指标": 0.99, "双千指标": 0.999, "双万指标": 0.9999}
    if values[strict] < limit[strict]:
        detail.status, detail.message = ERROR, f"{strict} below {limit[strict]}"
    elif values[loose] < limit[loose]:
        detail.status, detail.message = WARNING, f"{loose} below {limit[loose]}"
    else:
        detail.status = PASS


def canonical_dtype(dtype: str) -> str:
    """The precision tables use torch's names; MindSpore's Float16/BFloat16/Float32/Float64 map onto them."""
    lowered = dtype.lower()
    for name in ("bfloat16", "float16", "float32", "float64"):
        if lowered in (name, f"torch.{name}"):
            return f"torch.{name}"
    return dtype


def compare_output(
    name: str, api: str, bench: np.ndarray, device: np.ndarray, bench_dtype: str, device_dtype: str
) -> Detail:
    """One details row for one output (or one input gradient)."""
    detail = Detail(name, bench_dtype, device_dtype, str(tuple(device.shape)))
    device_dtype = canonical_dtype(device_dtype)
    if bench.shape != device.shape:
        detail.status, detail.message = ERROR, f"shape differs from the benchmark {tuple(bench.shape)}"
        return detail
    if device_dtype not in _FLOATS or standard_for(api) == BINARY:
        detail.values["二进制一致错误率"] = binary_error_rate(bench.astype(device.dtype, copy=False), device)
    else:
        detail.values.update(float_metrics(api, bench, device, device_dtype))
    judge(detail, api)
    return detail


def overall(statuses: list[str]) -> str:
    """Result row: error if any error, warning if any warning, else pass."""
    if not statuses:
        return ""
    if SKIP in statuses and all(s == SKIP for s in statuses):
        return SKIP
    if ERROR in statuses:
        return ERROR
    if WARNING in statuses:
        return WARNING
    return PASS
