"""csv2tb without a framework: CSV folders of the monitor's layout to TensorBoard, via the API and the CLI."""

import pytest
from click.testing import CliRunner
from result_tables import tensorboard_scalars

from msprobe.cli.main import cli
from msprobe.core.errors import DataFileError, UsageError
from msprobe.core.monitor.tensorboard import csv2tensorboard_by_step


def make_runs(root):
    for run, rank, scale in (("Dec03_21-34-40", 0, 1.0), ("Dec03_21-34-41", 1, 2.0), ("Dec03_21-50-00", 0, 9.0)):
        folder = root / f"{run}-rank{rank}"
        folder.mkdir(parents=True)
        (folder / "param_0-1.csv").write_text(
            f"vpp_stage,name,step,norm\n0,fc.weight,0,{scale}\n0,fc.weight,1,{scale + 0.5}\n"
        )
        (folder / "actv_0-0.csv").write_text(f"vpp_stage,name,step,micro_step,max\n0,fc.output,0,1,{scale * 3}\n")


@pytest.mark.parametrize("process_num", [1, 2])
def test_runs_in_the_time_range_are_converted(tmp_path, process_num):
    make_runs(tmp_path / "mon")
    output = csv2tensorboard_by_step(
        tmp_path / "mon", "Dec03_21-34-40", "Dec03_21-34-41", process_num, output_dirpath=tmp_path / "tb"
    )
    assert sorted(p.name for p in output.iterdir()) == ["Dec03_21-34-40-rank0", "Dec03_21-34-41-rank1"]
    rank1 = tensorboard_scalars(output / "Dec03_21-34-41-rank1")
    assert rank1["0:fc.weight/rank1/param_norm"] == {0: 2.0, 1: 2.5}
    assert rank1["0:fc.output:1/rank1/actv_max"] == {0: 6.0}


def test_cli_converts_and_filters_types(tmp_path):
    make_runs(tmp_path / "mon")
    args = ["monitor", "csv2tb", "-m", str(tmp_path / "mon"), "--time_start", "Dec03_21-50-00"]
    args += ["--time_end", "Dec03_21-50-00", "-t", "actv", "-o", str(tmp_path / "tb")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert list(tensorboard_scalars(tmp_path / "tb" / "Dec03_21-50-00-rank0")) == ["0:fc.output:1/rank0/actv_max"]


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"time_start": "yesterday"}, UsageError, "time_start 'yesterday'"),
        ({"time_start": "Dec04_00-00-00"}, UsageError, "is after time_end"),
        ({"data_type_list": ["weights"]}, UsageError, "unknown types"),
        ({"time_end": "Dec03_21-00-00", "time_start": "Dec03_20-00-00"}, UsageError, "no run folders"),
    ],
)
def test_bad_arguments_are_named(tmp_path, kwargs, error, message):
    make_runs(tmp_path / "mon")
    arguments = {"time_start": "Dec03_21-34-40", "time_end": "Dec03_21-34-41", **kwargs}
    with pytest.raises(error, match=message):
        csv2tensorboard_by_step(tmp_path / "mon", output_dirpath=tmp_path / "tb", **arguments)


def test_a_broken_csv_names_the_file_and_column(tmp_path):
    make_runs(tmp_path / "mon")
    (tmp_path / "mon" / "Dec03_21-34-40-rank0" / "param_0-1.csv").write_text("vpp_stage,label,norm\n0,x,1\n")
    args = ["monitor", "csv2tb", "-m", str(tmp_path / "mon"), "--time_start", "Dec03_21-34-40"]
    result = CliRunner().invoke(cli, [*args, "--time_end", "Dec03_21-34-40", "-o", str(tmp_path / "tb")])
    assert result.exit_code != 0
    assert "param_0-1.csv: column 'name' is missing" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "tb" / "Dec03_21-34-40-rank0").exists()


def test_missing_folder(tmp_path):
    with pytest.raises(DataFileError, match="not found"):
        csv2tensorboard_by_step(tmp_path / "nope", "Dec03_21-34-40", "Dec03_21-34-41")


def test_tensorboard_format_without_the_package_names_the_install(tmp_path, monkeypatch):
    import sys

    from msprobe.core.errors import ConfigError
    from msprobe.core.monitor import load_monitor_config

    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if it were not installed
    (tmp_path / "m.json").write_text('{"wg_distribution": true, "format": "tensorboard"}')
    with pytest.raises(ConfigError, match=r"m.json: format: .*pip install 'msprobe-core\[tensorboard\]'"):
        load_monitor_config(tmp_path / "m.json")
