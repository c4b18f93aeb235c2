"""config_check's static collection and the compare of two packs (26.x's config_check, no framework).

Two "environments" are two subprocesses whose import path holds a different
version of one package (a real .dist-info, as pip leaves it), with launch
scripts that differ in one hyperparameter.
"""

import json
import os
import subprocess
import sys
import zipfile

import pandas as pd
import pytest
from click.testing import CliRunner

from msprobe.cli.main import cli
from msprobe.core.config_check import compare_packs, hyperparameters, read_pack
from msprobe.core.errors import DataFileError

SCRIPT = """#!/bin/bash
export LR=3e-4
GBS=64   # global batch
torchrun --nproc_per_node 8 pretrain_gpt.py \\
    --lr $LR --global-batch-size ${GBS} \\
    --micro-batch-size 2 --bf16 --seq-length=4096 # trailing comment
"""


def _site(tmp_path, name, packages):
    site = tmp_path / name
    for package, version in packages.items():
        info = site / f"{package}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
    return site


def _collect(tmp_path, name, site, script_text, extra_env=None):
    script = tmp_path / f"{name}.sh"
    script.write_text(script_text)
    pack = tmp_path / f"{name}.zip"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           **(extra_env or {})}  # fmt: skip
    subprocess.run(
        [sys.executable, "-m", "msprobe.cli.main", "config_check", "-d", str(script), "-o", str(pack)],
        check=True, env=env, capture_output=True,
    )  # fmt: skip
    return pack


def test_the_launch_scripts_arguments_are_the_hyperparameters(tmp_path):
    (tmp_path / "train.sh").write_text(SCRIPT)
    (tmp_path / "model.yaml").write_text("model:\n  hidden_size: 1024\n  layers: [1, 2]\noptimizer: adam\n")
    found = hyperparameters([tmp_path / "train.sh", tmp_path / "model.yaml"])
    assert found == {
        "nproc_per_node": "8",
        "lr": "3e-4",
        "global-batch-size": "64",
        "micro-batch-size": "2",
        "bf16": True,
        "seq-length": "4096",
        "model.hidden_size": 1024,
        "model.layers": "[1, 2]",
        "optimizer": "adam",
    }


def test_two_environments_differ_in_a_package_a_hyperparameter_and_a_variable(tmp_path):
    bench = _collect(tmp_path, "bench", _site(tmp_path, "a", {"fakepkg": "1.0", "deepspeed": "0.14.0"}), SCRIPT)
    changed = SCRIPT.replace("--micro-batch-size 2", "--micro-batch-size 4")
    cmp = _collect(tmp_path, "cmp", _site(tmp_path, "b", {"fakepkg": "1.1", "deepspeed": "0.14.0"}), changed,
                   {"HCCL_DETERMINISTIC": "true"})  # fmt: skip
    result = compare_packs(bench, cmp, tmp_path / "result")
    verdicts = {item.item: item.verdict for item in result.items}
    assert verdicts == {"env": "error", "pip": "warning", "dataset": "skipped", "weights": "skipped",
                        "hyperparameters": "error", "random": "skipped"}  # fmt: skip
    differing = {item.item: [row["key"] for row in item.rows if row["verdict"] != "pass"] for item in result.items}
    # the two fake sites differ in fakepkg alone; the environment both also list may change between the two
    # collections (a test beside this one installs the example plugin), which is not the fake sites' doing
    faked = {"fakepkg", "deepspeed"}
    assert [key for key in differing["pip"] if key in faked] == ["fakepkg"]
    assert differing["hyperparameters"] == ["micro-batch-size"]
    assert differing["env"] == ["HCCL_DETERMINISTIC"]
    assert not result.passed and result.summary_line().startswith("config_check: env differs first at HCCL_")
    summary = pd.read_excel(tmp_path / "result" / "result.xlsx", sheet_name="summary")
    assert summary.to_dict("list") == {"file_name": list(verdicts), "pass_check": list(verdicts.values())}
    hyper = pd.read_excel(tmp_path / "result" / "result.xlsx", sheet_name="hyperparameters")
    row = hyper[hyper["key"] == "micro-batch-size"].iloc[0]
    assert (str(row["bench"]), str(row["cmp"]), row["verdict"]) == ("2", "4", "error")


def test_a_key_package_is_an_error_and_the_command_exits_non_zero(tmp_path):
    bench = _collect(tmp_path, "bench", _site(tmp_path, "a", {"deepspeed": "0.14.0"}), SCRIPT)
    cmp = _collect(tmp_path, "cmp", _site(tmp_path, "b", {"deepspeed": "0.15.1"}), SCRIPT)
    result = CliRunner().invoke(cli, ["config_check", "-c", str(bench), str(cmp), "-o", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert "pip differs first at deepspeed: 0.14.0 (bench) vs 0.15.1 (cmp), error" in result.output
    same = CliRunner().invoke(cli, ["config_check", "-c", str(bench), str(bench), "-o", str(tmp_path / "same")])
    assert same.exit_code == 0 and "every item passes" in same.output


def test_secrets_are_not_collected(tmp_path):
    pack = _collect(tmp_path, "p", _site(tmp_path, "a", {}), SCRIPT,
                    {"HF_TOKEN": "hf_abc", "NCCL_IB_HCA": "mlx5", "HCCL_AUTH_KEY": "x"})  # fmt: skip
    env = read_pack(pack)["env.json"]
    assert env["NCCL_IB_HCA"] == "mlx5" and "HF_TOKEN" not in env and "HCCL_AUTH_KEY" not in env


@pytest.mark.parametrize(
    "members, problem",
    [
        ({"env.json": "{}"}, "no msprobe manifest"),
        ({"manifest.json": '{"tool": "msprobe"}', "run.sh": "rm -rf /"}, "not one a pack holds"),
        ({"manifest.json": "{not json"}, "not valid JSON"),
        ({"manifest.json": '{"tool": "msprobe"}', "env.json": "[" * 100_000 + "]" * 100_000}, "nested too deeply"),
        ({"manifest.json": '{"tool": "msprobe"}', "env.json": "[1, 2]"}, "'env.json': expected an object, not list"),
        ({"manifest.json": '{"tool": "msprobe"}', "weights/rank0/step0.json": "3"}, "expected an object or a list"),
    ],
)
def test_a_bad_pack_is_one_error_naming_it(tmp_path, members, problem):
    pack = tmp_path / "bad.zip"
    with zipfile.ZipFile(pack, "w") as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    with pytest.raises(DataFileError, match=problem) as error:
        read_pack(pack)
    assert str(pack) in str(error.value)


def test_the_command_needs_one_mode_and_two_paths(tmp_path):
    assert "exactly one of -d" in CliRunner().invoke(cli, ["config_check"]).output
    assert "needs two paths" in CliRunner().invoke(cli, ["config_check", "-c", str(tmp_path)]).output


def test_the_pack_lists_installed_packages_with_versions(tmp_path):
    pack = _collect(tmp_path, "p", _site(tmp_path, "a", {"fakepkg": "3.2.1"}), SCRIPT)
    members = read_pack(pack)
    assert members["pip.json"]["fakepkg"] == "3.2.1" and members["manifest.json"]["kind"] == "static"
    assert json.loads(json.dumps(members["hyperparameters.json"]))["lr"] == "3e-4"
