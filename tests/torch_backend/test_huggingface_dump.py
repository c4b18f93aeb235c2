"""A HuggingFace Trainer run dumped through DumpCallback: one dump step per optimizer step, modules included."""

import json

import torch
import transformers  # the [huggingface] extra, which the torch session installs

from msprobe.pytorch.integrations.huggingface import DumpCallback


def test_a_trainer_run_is_dumped_step_by_step(tmp_path):
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=32, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(config)
    tokens = torch.randint(0, 32, (8, 8))
    dataset = [{"input_ids": row, "labels": row} for row in tokens]
    arguments = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=3, per_device_train_batch_size=4, use_cpu=True,
        report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True,
    )  # fmt: skip
    callback = DumpCallback(task="statistics", level="mix", dump_path=str(tmp_path / "dump"), step=[0, 2])
    transformers.Trainer(model=model, args=arguments, train_dataset=dataset, callbacks=[callback]).train()

    dumped = sorted(p.parent.parent.name for p in (tmp_path / "dump").glob("step*/rank/dump.json"))
    assert dumped == ["step0", "step2"]  # the config's steps, counted in optimizer steps
    for step in dumped:
        data = json.loads((tmp_path / "dump" / step / "rank" / "dump.json").read_text())["data"]
        names = list(data)
        assert "Module.transformer.h.0.attn.GPT2Attention.forward.0" in names  # the Trainer's model, at mix
        assert "Module.transformer.h.0.attn.GPT2Attention.backward.0" in names
        assert any(name.startswith("Functional.linear.") or name.startswith("Torch.addmm.") for name in names)
        assert any(".parameters_grad" in name for name in names)
