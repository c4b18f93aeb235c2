"""CPU tensors are measured by msprobe-core's C kernels; whatever they cannot read is measured by torch as before."""

import json
import math

import numpy as np
import pytest
import torch
from summaries import summary_of

from msprobe.core.dump import float_stats
from msprobe.core.dump.writer import RawJSON
from msprobe.pytorch.dump import measuring, parallel
from msprobe.pytorch.dump.tensors import TensorSummarizer

KEYS = ("Max", "Min", "Mean", "Norm")


def _cases() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    wide = torch.randn(64, 48)
    with_inf = torch.randn(100)
    with_inf[7] = float("inf")
    with_nan = torch.randn(100)
    with_nan[3] = float("nan")
    both_infs = torch.randn(70)
    both_infs[[5, 60]] = torch.tensor([float("inf"), float("-inf")])
    nan_and_inf = torch.randn(70, dtype=torch.float64)
    nan_and_inf[[1, 2]] = torch.tensor([float("-inf"), float("nan")], dtype=torch.float64)
    return {
        "float32": torch.randn(1000) * 4 + 1,
        "float32 odd size": torch.randn(3, 5, 7),
        "float64": torch.randn(333, dtype=torch.float64),
        "float16": torch.randn(257).half(),
        "bfloat16": torch.randn(257).bfloat16(),
        "transposed": wide.t(),
        "permuted": torch.randn(4, 6, 5).permute(2, 0, 1),
        "sliced": wide[:, 5:9],
        "offset view": wide[10:20],
        "negative view": torch._neg_view(wide),
        "parameter": torch.nn.Parameter(torch.randn(20, 20)),
        "int": torch.arange(-5, 17),
        "with inf": with_inf,
        "with nan": with_nan,
        "with -inf, float64": -with_inf.double(),
        "with both infs": both_infs,
        "with nan and -inf, float64": nan_and_inf,
        "all inf": torch.full((40,), float("-inf")),
        "all nan": torch.full((3, 3), float("nan")),
        "infs only": torch.tensor([float("inf"), float("-inf"), float("inf")]),
        "causal mask": torch.triu(torch.full((64, 64), float("-inf")), diagonal=1),
        "float16 with inf": torch.tensor([1.0, 65504.0, float("inf"), -3.0]).half(),
        "transposed with nan": with_nan.reshape(10, 10).t(),
        "norm beyond float32": torch.full((4,), 3.0e38),
        "one element": torch.tensor([2.5]),
        "0-d": torch.tensor(-1.5),
    }


@pytest.mark.parametrize("case", list(_cases()))
def test_kernels_and_torch_agree(case, monkeypatch):
    tensor = _cases()[case]
    with_kernels = summary_of(TensorSummarizer("statistics", "statistics"), tensor)
    monkeypatch.setattr(float_stats, "AVAILABLE", False)
    by_torch = summary_of(TensorSummarizer("statistics", "statistics"), tensor)
    assert with_kernels.keys() == by_torch.keys()
    if not all(map(math.isfinite, (float(by_torch[key]) for key in KEYS))):  # special values: exact either way
        assert [str(with_kernels[key]) for key in by_torch] == [str(by_torch[key]) for key in by_torch]
    for key, expected in by_torch.items():
        value = with_kernels[key]
        if isinstance(expected, float) and math.isnan(expected):  # the pair too, where all are nan
            assert math.isnan(value), key
        elif key in KEYS and isinstance(expected, float):
            # torch sums float32 in float32; the kernels in double
            assert math.isclose(value, expected, rel_tol=2e-6, abs_tol=1e-6), (key, value, expected)
        else:
            assert value == expected, key


def test_the_kernels_measure_plain_cpu_tensors(monkeypatch):
    assert float_stats.AVAILABLE
    calls = []
    original = float_stats.stats_at
    monkeypatch.setattr(float_stats, "stats_at", lambda *args: calls.append(args[1:]) or original(*args))
    cases = _cases()
    for case in ("float32", "float64", "offset view", "parameter", "float16"):
        measuring.measure(cases[case])
    # float16 is widened to float32 by torch first, then read by the kernel
    assert calls == [(1000, "f"), (333, "d"), (480, "f"), (400, "f"), (257, "f")]
    calls.clear()
    special = []
    found = float_stats.nonfinite_stats_at
    monkeypatch.setattr(float_stats, "nonfinite_stats_at", lambda *args: special.append(args[1:]) or found(*args))
    monkeypatch.setattr(torch, "aminmax", None)  # nothing below is measured by torch
    for case in ("transposed", "with inf", "causal mask"):
        measuring.measure(cases[case])
    # a transpose fills its block of memory; an inf is measured by the second kernel, which knows the pair
    assert [count for count, _ in calls] == [3072, 100, 4096] and special == [(100, "f"), (4096, "f")]
    monkeypatch.undo()
    calls.clear()
    monkeypatch.setattr(float_stats, "stats_at", lambda *args: calls.append(args[1:]) or original(*args))
    for case in ("sliced", "negative view"):
        measuring.measure(cases[case])
    assert calls == []  # a slice of columns and a negative view do not fill a block: torch measures them


def test_mean_and_norm_are_correctly_rounded():
    torch.manual_seed(1)
    tensor = torch.randn(1 << 20) + 0.25
    stats = summary_of(TensorSummarizer("statistics", "statistics"), tensor)
    wide = tensor.double()
    assert stats["Mean"] == float(np.float32(wide.mean().item()))
    assert stats["Norm"] == float(np.float32(wide.norm().item()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_the_overflow_screen(dtype):
    screen = TensorSummarizer("overflow_check", "statistics")
    finite = torch.randn(50, 40).to(dtype)
    assert screen.statistics(finite) == {}
    assert screen.statistics(finite.t()) == {}  # not contiguous: torch's sum screens it
    for bad in (float("inf"), float("nan")):
        broken = finite.clone()
        broken[3, 4] = bad
        for tensor in (broken, broken.t()):
            found = TensorSummarizer("overflow_check", "statistics").statistics(tensor)
            assert found and any(not math.isfinite(float(found[key])) for key in ("Max", "Min"))


def _general_summarizer() -> TensorSummarizer:
    summarizer = TensorSummarizer("statistics", "statistics")
    summarizer.quick_texts = None
    return summarizer


@pytest.mark.parametrize("case", list(_cases()))
def test_the_short_path_writes_the_entry_the_general_path_writes(case):
    tensor = _cases()[case]
    quick = TensorSummarizer("statistics", "statistics")
    assert quick.quick_texts is not None
    first, again = summary_of(quick, tensor), summary_of(quick, tensor)  # measured, then from the cache
    expected = json.dumps(summary_of(_general_summarizer(), tensor))  # as text: nan equals nan there
    assert json.dumps(first) == expected  # the same keys in the same order
    assert json.dumps(again) == expected


def test_the_short_path_measures_again_whatever_changed():
    summarizer = TensorSummarizer("statistics", "statistics")
    tensor = torch.arange(16, dtype=torch.float32)
    assert summary_of(summarizer, tensor)["Max"] == 15.0
    tensor.mul_(2)  # a new version
    assert summary_of(summarizer, tensor)["Max"] == 30.0
    summarizer.overwriting([tensor[:4]])  # a write the dump saw through an alias, version unchanged
    with torch.no_grad():
        tensor.data[0] = 100.0  # through .data: the version stays as it was
    assert summary_of(summarizer, tensor)["Max"] == 100.0
    tensor.data = tensor.data.view(4, 4)  # the same memory under another shape
    assert summary_of(summarizer, tensor)["shape"] == [4, 4]
    tensor.requires_grad_(True)
    assert summary_of(summarizer, tensor)["requires_grad"] is True
    tensor.data = torch.zeros(4, 4)  # other memory, same version
    assert summary_of(summarizer, tensor)["Max"] == 0.0
    tensor.data = tensor.data.double()  # another dtype
    assert summary_of(summarizer, tensor)["dtype"] == "torch.float64"


def test_the_short_path_leaves_every_other_task_to_the_general_one():
    assert TensorSummarizer("statistics", "md5", live_diff=True).quick_texts is None  # each call's values are read
    assert TensorSummarizer("statistics", "xor").quick_texts is None
    assert TensorSummarizer("tensor", "statistics").quick_texts is None
    assert TensorSummarizer("overflow_check", "statistics").quick_texts is None
    assert TensorSummarizer("statistics", "statistics", deferred=True).quick_texts is None


@pytest.mark.parametrize("summary_mode", ["statistics", "md5"])
@pytest.mark.parametrize("case", [*_cases(), "-0.0, 0-d", "float64 squares beyond range"])
def test_in_a_run_of_several_processes_the_short_path_writes_the_general_path_s_sums(monkeypatch, case, summary_mode):
    """A run of several processes adds the float64 sums that merge its ranks: the C path writes them as the general
    path does, and they are the sums of the values in float64 (math.fsum: exact, then rounded once)."""
    tensor = {
        **_cases(),
        "-0.0, 0-d": torch.tensor(-0.0),
        "float64 squares beyond range": torch.tensor([1e200, -3.0], dtype=torch.float64),
    }[case]
    monkeypatch.setattr(parallel, "world", lambda: (0, 2))
    quick = TensorSummarizer("statistics", summary_mode)
    assert quick.shard_sums and quick.quick_texts is not None
    general = TensorSummarizer("statistics", summary_mode)
    general.quick_texts = None
    expected = json.dumps(summary_of(general, tensor))
    assert json.dumps(summary_of(quick, tensor)) == expected
    assert json.dumps(summary_of(quick, tensor)) == expected  # from the cache
    found = json.loads(expected)
    if tensor.is_floating_point() and "Max" in found and tensor.numel():
        values = tensor.detach().double().reshape(-1).tolist()
        if all(math.isfinite(value) for value in values):
            assert found["Sum"] == pytest.approx(math.fsum(values), rel=1e-12, abs=1e-300)
            assert found["SumSq"] == pytest.approx(math.fsum(v * v for v in values), rel=1e-12)
            assert list(found).index("Sum") == list(found).index("requires_grad") + 1
        assert found.get("parameter", False) is isinstance(tensor, torch.nn.Parameter)


@pytest.mark.parametrize("summary_mode", ["statistics", "md5"])
def test_a_dtensor_s_summary_from_the_short_path_is_the_general_path_s(monkeypatch, tmp_path, summary_mode):
    """A DTensor's entry is its shard's cached text with the DTensor's own keys spliced in: requires_grad, the
    parameter mark and where the shard sits, as the general path writes them (a one-process mesh stands in for a
    run of several, whose sums it then writes)."""
    import torch.distributed as dist
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor, init_device_mesh

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("tp",))
        torch.manual_seed(0)
        weight = torch.nn.Parameter(distribute_tensor(torch.randn(8, 4), mesh, [Shard(0)]))
        activation = distribute_tensor(torch.randn(3, 5), mesh, [Replicate()])
        monkeypatch.setattr(parallel, "world", lambda: (0, 2))
        quick = TensorSummarizer("statistics", summary_mode)
        general = TensorSummarizer("statistics", summary_mode)
        general.quick_texts = None
        for tensor in (weight, activation, weight.detach()):
            found = quick(tensor, "x")
            assert isinstance(found, RawJSON)  # the short path took it
            expected = general(tensor, "x")
            assert json.loads(found.text) == expected
            assert expected["requires_grad"] is tensor.requires_grad
            assert expected.get("parameter", False) is isinstance(tensor, torch.nn.Parameter)
            assert expected["shard"]["global_shape"] == list(tensor.shape)
    finally:
        dist.destroy_process_group()
