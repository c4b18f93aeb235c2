"""config_check inside a PyTorch training script, and checkpoint compare of PyTorch checkpoints.

Two runs of one script (each in its own process, as two machines would be)
differ in one package version, one hyperparameter of the launch script and
one dataset batch; the compare must name each of them and pass the rest.
Expected checkpoint metrics are computed with numpy from the saved tensors.
"""

import argparse
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from msprobe.cli.main import cli
from msprobe.core.config_check import compare_packs, read_pack

TRAINING = textwrap.dedent(
    """
    import sys
    from msprobe.core.config_check import ConfigChecker
    ConfigChecker.apply_patches("pytorch")
    import torch
    torch.manual_seed(int(sys.argv[4]) if len(sys.argv) > 4 else 0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.1), torch.nn.Linear(4, 2))
    ConfigChecker(model=model, shell_path=[sys.argv[1]], output_zip_path=sys.argv[2], fmk="pytorch")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        batch = torch.full((2, 4), float(step))
        if step == 1 and sys.argv[3] == "changed":
            batch[0, 0] = 7.0  # one element of one batch differs
        model(batch).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    """
)


def _site(tmp_path, name, version):
    info = tmp_path / name / f"fakepkg-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fakepkg\nVersion: {version}\n")
    return tmp_path / name


def _run(tmp_path, name, version, script_text, batch, *seed):
    (tmp_path / "train.py").write_text(TRAINING)
    script = tmp_path / f"{name}.sh"
    script.write_text(script_text)
    pack = tmp_path / f"{name}.zip"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_site(tmp_path, name, version)),
                                                       os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    command = [sys.executable, str(tmp_path / "train.py"), str(script), str(pack), batch, *seed]
    subprocess.run(command, check=True, env=env)
    return pack


def test_two_runs_differ_in_a_package_a_hyperparameter_and_a_batch(tmp_path):
    bench = _run(tmp_path, "bench", "1.0", "python train.py --lr 0.1 --batch 2\n", "same")
    cmp = _run(tmp_path, "cmp", "1.1", "python train.py --lr 0.2 --batch 2\n", "changed")
    members = read_pack(bench)
    assert sorted(name for name in members if name.startswith("dataset/")) == [
        "dataset/rank0/step0.json", "dataset/rank0/step1.json", "dataset/rank0/step2.json"]  # fmt: skip
    assert [call["api"] for call in members["random/rank0.json"]][:1] == ["torch.manual_seed"]
    assert "Functional.dropout" in {call["api"] for call in members["random/rank0.json"]}
    result = compare_packs(bench, cmp, tmp_path / "result")
    differing = {item.item: [row["key"] for row in item.rows if row["verdict"] != "pass"] for item in result.items}
    assert differing["pip"] == ["fakepkg"]
    assert differing["hyperparameters"] == ["lr"]
    assert differing["dataset"] == ["rank0/step1/args.0"]  # that batch, and no other
    # the weights agree until the changed batch has been trained on
    assert not [key for key in differing["weights"] if key.startswith(("rank0/step0/", "rank0/step1/"))]
    assert {key.split("/")[1] for key in differing["weights"]} == {"step2"}
    assert differing["random"] == []  # the same random calls, in the same order, from the same places
    assert {item.item: item.verdict for item in result.items}["random"] == "pass"


def test_another_seed_is_a_difference_and_the_first_one_is_named_in_the_documented_order(tmp_path):
    """manual_seed(0) against manual_seed(1): the random item differs at that call, with both seeds; the
    weights differ from the first micro-step, and the summary names them first although a batch differs too
    (the documented order: env, pip, hyperparameters, weights, dataset, random)."""
    bench = _run(tmp_path, "bench", "1.0", "python train.py\n", "same", "0")
    cmp = _run(tmp_path, "cmp", "1.0", "python train.py\n", "changed", "1")
    result = compare_packs(bench, cmp, tmp_path / "result")
    [random_item] = [item for item in result.items if item.item == "random"]
    [seeding] = [row for row in random_item.rows if row["verdict"] != "pass"]
    assert (seeding["bench"]["api"], seeding["bench"]["seed"], seeding["cmp"]["seed"]) == (
        "torch.manual_seed",
        "0",
        "1",
    )
    assert [item.item for item in result.items] == ["env", "pip", "hyperparameters", "weights", "dataset", "random"]
    item, row = result.first_difference()
    assert (item, row["key"].split("/")[:2]) == ("weights", ["rank0", "step0"])
    assert result.summary_line().startswith("config_check: weights differs first at rank0/step0/")


def _state_dicts(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3), torch.nn.Linear(3, 2))
    before = {name: value.clone() for name, value in model.state_dict().items()}
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(5, 4)).square().sum().backward()
    optimizer.step()
    return before, {name: value.clone() for name, value in model.state_dict().items()}


def test_checkpoints_one_optimizer_step_apart_name_every_parameter(tmp_path):
    before, after = _state_dicts(tmp_path)
    torch.save(before, tmp_path / "step0.pt")
    torch.save({"state_dict": after, "epoch": 1}, tmp_path / "step1.pth")  # a trainer's checkpoint
    output = tmp_path / "ckpt_similarity.json"
    result = CliRunner().invoke(
        cli, ["config_check", "-c", str(tmp_path / "step0.pt"), str(tmp_path / "step1.pth"), "-o", str(output)]
    )
    assert result.exit_code == 1, result.output  # every parameter moved: they differ
    rows = json.loads(output.read_text())
    assert sorted(rows) == sorted(before)
    for name in before:
        a, b = before[name].double().numpy().ravel(), after[name].double().numpy().ravel()
        assert rows[name]["l2"] == pytest.approx(np.linalg.norm(a - b), rel=1e-9)
        norms = np.linalg.norm(a) * np.linalg.norm(b)
        if norms:
            assert rows[name]["cos"] == pytest.approx(a @ b / norms, abs=1e-12)
        else:  # a bias that starts at zero: no cosine, as numpy's would be nan
            assert rows[name]["cos"] is None
        assert rows[name]["numel"] == a.size and rows[name]["shape"] == list(before[name].shape)
        assert rows[name]["l2"] > 0  # Adam moves every parameter


def _megatron(folder, iteration, shards):
    (folder / "latest_checkpointed_iteration.txt").parent.mkdir(parents=True, exist_ok=True)
    (folder / "latest_checkpointed_iteration.txt").write_text(str(iteration))
    for shard, state in shards.items():
        target = folder / f"iter_{iteration:07d}" / shard
        target.mkdir(parents=True)
        torch.save(
            {"args": argparse.Namespace(lr=0.1, tensor_model_parallel_size=len(shards)), "iteration": iteration,
             "model": state, "rng_state": [{"np_rng_state": np.random.get_state()}],
             "checkpoint_version": 3.0},
            target / "model_optim_rng.pt",
        )  # fmt: skip


def test_megatron_checkpoint_folders_compare_shard_with_shard(tmp_path):
    before, after = _state_dicts(tmp_path)
    half = {name: value for name, value in before.items() if name.startswith("0.")}
    other = {name: value for name, value in before.items() if not name.startswith("0.")}
    _megatron(tmp_path / "a", 10, {"mp_rank_00": half, "mp_rank_01": other})
    moved = {name: after[name] for name in half}
    _megatron(tmp_path / "b", 20, {"mp_rank_00": moved, "mp_rank_01": {n: after[n] for n in other}})
    output = tmp_path / "out.json"
    result = CliRunner().invoke(
        cli, ["checkpoint_compare", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(output)]
    )
    assert result.exit_code == 1, result.output  # the second checkpoint is a step later
    rows = json.loads(output.read_text())
    assert sorted(rows) == sorted([f"mp_rank_00/{n}" for n in half] + [f"mp_rank_01/{n}" for n in other])


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path):
    class Payload:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    torch.save({"model": {"w": torch.ones(1)}, "evil": Payload()}, tmp_path / "evil.pt")
    torch.save({"w": torch.ones(1)}, tmp_path / "good.pt")
    result = CliRunner().invoke(
        cli, ["checkpoint_compare", str(tmp_path / "evil.pt"), str(tmp_path / "good.pt"), "-o", str(tmp_path / "o")]
    )
    assert result.exit_code != 0 and "not a readable PyTorch checkpoint" in result.output
    assert "pwned" not in result.output and not (tmp_path / "o").exists()
