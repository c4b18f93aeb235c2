"""A PyTorch Lightning run dumped through DumpCallback: one dump step per optimizer step, accumulation included."""

import json

import lightning  # the [lightning] extra, which the torch session installs
import torch

from msprobe.pytorch.integrations.lightning import DumpCallback


class Regression(lightning.LightningModule):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.body(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def test_each_optimizer_step_is_one_dump_step(tmp_path):
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(24, 4), torch.randn(24, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=3)  # 8 batches
    callback = DumpCallback(task="statistics", level="mix", dump_path=str(tmp_path / "dump"))
    trainer = lightning.Trainer(
        max_steps=4, accumulate_grad_batches=2, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, callbacks=[callback],
    )  # fmt: skip
    trainer.fit(Regression(), loader)

    folders = sorted(p.parent.parent.name for p in (tmp_path / "dump").glob("step*/rank/dump.json"))
    assert folders == ["step0", "step1", "step2", "step3"]  # four optimizer steps of two batches each
    for folder in folders:
        names = set(json.loads((tmp_path / "dump" / folder / "rank" / "dump.json").read_text())["data"])
        # both accumulated batches' calls, and no third
        assert {"Module.body.0.Linear.forward.0", "Module.body.0.Linear.forward.1"} <= names
        assert "Module.body.0.Linear.forward.2" not in names
        assert {"Module.body.2.Linear.backward.0", "Module.body.2.Linear.backward.1"} <= names
        assert any(name.startswith("Functional.mse_loss.") for name in names)
