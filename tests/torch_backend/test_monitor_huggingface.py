"""TrainerMon in a HuggingFace Trainer run, attached by MonitorCallback."""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")  # installed by the torch nox session

from result_tables import csv_rows  # noqa: E402

from msprobe.pytorch.monitor import MonitorCallback  # noqa: E402


class TinyRegressor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

    def forward(self, x, y):
        return {"loss": torch.nn.functional.mse_loss(self.body(x).squeeze(-1), y)}


class GradientRecorder(transformers.TrainerCallback):
    """What the optimizer is about to apply, step by step, for the comparison."""

    def __init__(self):
        self.norms = []

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.norms.append(model.body[0].weight.grad.norm().item())


def test_trainer_run_is_monitored(tmp_path, monkeypatch):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    (tmp_path / "m.json").write_text(json.dumps({"wg_distribution": True, "mv_distribution": True, "ops": ["norm"]}))
    torch.manual_seed(0)
    data = [{"x": torch.randn(4), "y": torch.randn(())} for _ in range(24)]
    arguments = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"),
        max_steps=3,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    recorder = GradientRecorder()
    trainer = transformers.Trainer(
        model=TinyRegressor(),
        args=arguments,
        train_dataset=data,
        callbacks=[recorder, MonitorCallback(str(tmp_path / "m.json"))],
    )
    trainer.train()
    (folder,) = list((tmp_path / "out").iterdir())
    assert len(recorder.norms) == 3
    for step, expected in enumerate(recorder.norms):
        rows = csv_rows(folder / f"grad_reduced_{step}-{step}.csv")
        row = next(r for r in rows if r["name"] == "body.0.weight")
        assert float(row["norm"]) == pytest.approx(expected, rel=1e-5)
    assert (folder / "exp_avg_2-2.csv").exists()
