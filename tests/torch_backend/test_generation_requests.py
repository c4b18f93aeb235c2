"""One request out of a batch (``request_id``), part of a tensor (``slice``), and KV caches summarised not copied.

The expected tensors are cut by hand from a dump of the whole batch, with the
batch's layout written out in the test, and checked again against the same
prompt generated alone.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from msprobe.core.errors import ConfigError, UsageError

transformers = pytest.importorskip("transformers")

BATCH, PROMPT, NEW_TOKENS, KEPT = 4, 5, 4, 2


def gpt2() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=48, n_head=3, vocab_size=300, n_positions=64, bos_token_id=1, eos_token_id=2
    )
    return transformers.GPT2LMHeadModel(config).eval()


def write_config(folder: Path, task: str, level: str = "mix", **section) -> str:
    path = folder / f"config_{task}.json"
    config = {"task": task, "level": level, "dump_path": str(folder / "dump"), task: section}
    path.write_text(json.dumps(config))
    return str(path)


def generate(
    root: Path, prompts: torch.Tensor, task: str = "tensor", level: str = "mix", change=None, **section
) -> Path:
    from msprobe.pytorch import PrecisionDebugger, dump_generation

    root.mkdir()
    debugger = PrecisionDebugger(config_path=write_config(root, task, level, **section))
    model = gpt2()
    if change is not None:
        change(model)
    with dump_generation(debugger, model), torch.no_grad():
        model.generate(prompts, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
    return root / "dump"


def tensors_of(entry, found=None) -> list[dict]:
    """Every tensor summary inside an entry's value, in order."""
    found = [] if found is None else found
    if isinstance(entry, dict) and entry.get("type") == "torch.Tensor":
        found.append(entry)
    elif isinstance(entry, dict):
        for value in entry.values():
            tensors_of(value, found)
    elif isinstance(entry, list):
        for value in entry:
            tensors_of(value, found)
    return found


def load(step_dir: Path, summary: dict) -> torch.Tensor:
    return torch.load(step_dir / "rank" / "dump_tensor_data" / summary["data_name"], weights_only=True)


def prompts_of_the_batch() -> torch.Tensor:
    return torch.randint(3, 300, (BATCH, PROMPT), generator=torch.Generator().manual_seed(7))


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("requests")
    prompts = prompts_of_the_batch()
    whole = generate(root / "whole", prompts)
    kept = generate(root / "kept", prompts, request_id=KEPT)
    alone = generate(root / "alone", prompts[KEPT : KEPT + 1])
    return whole, kept, alone


def test_a_batch_of_four_dumped_with_request_id_holds_only_that_requests_rows(dumps):
    whole, kept, _ = dumps
    steps = [f"step{k}" for k in range(NEW_TOKENS)]
    assert sorted(path.name for path in kept.iterdir()) == steps  # prefill and each decode step; none empty
    cut = kept_whole = 0
    for k, step in enumerate(steps):
        tokens = PROMPT if k == 0 else 1  # each request brings its prompt, then one token a step
        whole_data = json.loads((whole / step / "rank" / "dump.json").read_text())["data"]
        kept_data = json.loads((kept / step / "rank" / "dump.json").read_text())["data"]
        assert kept_data.keys() == whole_data.keys()
        for name, entry in kept_data.items():
            for full, part in zip(tensors_of(whole_data[name]), tensors_of(entry), strict=True):
                if "data_name" not in full:
                    continue
                big, small = load(whole / step, full), load(kept / step, part)
                leading = full["shape"][0] if full["shape"] else None
                if leading == BATCH * tokens:  # one row per token of every request (GPT-2's Conv1D flattens)
                    expected = big[KEPT * tokens : (KEPT + 1) * tokens]
                elif leading == BATCH:  # one row per request
                    expected = big[KEPT : KEPT + 1]
                else:  # a weight, a position table, a mask shared by all rows: whole
                    expected = big
                    kept_whole += 1
                cut += expected is not big
                assert part["shape"] == list(expected.shape), (step, name)
                assert torch.equal(small, expected), (step, name)
                if expected.is_floating_point() and expected.numel():
                    assert part["Max"] == pytest.approx(float(expected.max()), rel=1e-6), (step, name)
    print(f"\ntensors cut to the request's rows: {cut}; kept whole: {kept_whole}")
    assert cut > 50 * NEW_TOKENS and kept_whole > 0


def test_the_kept_request_matches_the_same_prompt_generated_alone(dumps):
    _, kept, alone = dumps
    compared = 0
    for step in sorted(path.name for path in alone.iterdir()):
        kept_data = json.loads((kept / step / "rank" / "dump.json").read_text())["data"]
        alone_data = json.loads((alone / step / "rank" / "dump.json").read_text())["data"]
        assert kept_data.keys() == alone_data.keys()
        for name in kept_data:
            for ours, single in zip(tensors_of(kept_data[name]), tensors_of(alone_data[name]), strict=True):
                assert ours["shape"] == single["shape"], (step, name)
                if ours.get("Mean") is not None and single["dtype"].startswith("torch.float"):
                    assert ours["Mean"] == pytest.approx(single["Mean"], rel=1e-4, abs=1e-5), (step, name)
                    compared += 1
    assert compared > 100


def test_one_request_from_batches_of_other_sizes_compares_step_by_step(dumps, tmp_path):
    """docs/serving.md: the same request run in a batch of four and alone compares step by step. The batch's
    sizes are arguments of its calls (a reshape to 4 rows, or to 1), and a matrix product four rows high may
    round otherwise: neither is a divergence. A weight changed in one run still is, at its layer."""
    from msprobe.core.diagnosis import diagnose_pair

    _, kept, alone = dumps
    for k in range(NEW_TOKENS):
        found = diagnose_pair(kept / f"step{k}" / "rank", alone / f"step{k}" / "rank")
        assert found.verdict != "divergence", found.line()
        assert "argument" not in found.line(), found.line()

    def nudge(model: torch.nn.Module) -> None:
        with torch.no_grad():
            model.transformer.h[1].mlp.c_fc.weight[0, 0] += 0.5

    changed = generate(tmp_path / "changed", prompts_of_the_batch()[KEPT : KEPT + 1], change=nudge)
    found = diagnose_pair(changed / "step0" / "rank", kept / "step0" / "rank")
    assert (found.verdict, found.module) == ("divergence", "transformer.h.1.mlp.c_fc"), found.line()
    assert json.loads((kept / "step0" / "rank" / "dump.json").read_text())["batch"] == {
        "requests": BATCH,
        "tokens": BATCH * PROMPT,
    }


class Engine(torch.nn.Module):
    """A serving engine's forward: every scheduled token of every request on one flat dimension, and one row of
    logits per request (its last token)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.embed = torch.nn.Embedding(50, 8)
        self.proj = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 50)

    def forward(self, tokens: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.proj(self.embed(tokens)))
        return self.head(hidden[last])


def test_the_generic_api_keeps_one_request_of_an_engines_flat_batch(tmp_path):
    from msprobe.pytorch import PrecisionDebugger

    debugger = PrecisionDebugger(config_path=write_config(tmp_path, "tensor", request_id="c"))
    engine = Engine()
    schedule = [(["a", "b", "c"], [3, 2, 4]), (["a", "c"], [1, 1]), (["a", "b"], [1, 1]), (["c"], [1])]
    inputs = []
    for ids, counts in schedule:
        tokens = torch.arange(sum(counts)) + 10 * len(inputs)
        last = torch.tensor(np.cumsum(counts) - 1)
        inputs.append((ids, counts, tokens))
        debugger.start(engine, request_ids=ids, scheduled_tokens=counts)
        engine(tokens, last)
        debugger.stop()
        debugger.step()
    dump = tmp_path / "dump"
    # the third forward has no "c": no step of it, and the request's steps count its own forwards
    assert sorted(path.name for path in dump.iterdir()) == ["step0", "step1", "step2"]
    for step, (ids, counts, tokens) in enumerate([inputs[0], inputs[1], inputs[3]]):
        position = ids.index("c")
        start = sum(counts[:position])
        data = json.loads((dump / f"step{step}" / "rank" / "dump.json").read_text())["data"]
        embedded = data["Functional.embedding.0.forward"]
        kept_tokens = load(dump / f"step{step}", embedded["input_args"][0])
        assert kept_tokens.tolist() == tokens[start : start + counts[position]].tolist()
        logits = data["Functional.linear.1.forward"]["output"][0]
        assert logits["shape"] == [1, 50]  # one row per request: the kept one's
        weight = data["Functional.linear.1.forward"]["input_args"][1]
        assert weight["shape"] == [50, 8]  # a parameter is never cut, even with a first dimension that could count


def test_slice_keeps_part_of_each_dimension(tmp_path):
    from msprobe.pytorch import PrecisionDebugger

    debugger = PrecisionDebugger(
        config_path=write_config(tmp_path, "statistics", "L1", slice=[{"end": 2}, {"start": 1, "step": 2}])
    )
    values = torch.arange(30, dtype=torch.float32).reshape(5, 6) ** 1.5
    debugger.start()
    torch.relu(values)
    debugger.stop()
    debugger.step()
    data = json.loads((tmp_path / "dump" / "step0" / "rank" / "dump.json").read_text())["data"]
    entry = data["Torch.relu.0.forward"]["input_args"][0]
    expected = values.numpy().astype(np.float64)[:2, 1::2]
    assert entry["shape"] == [2, 3]
    assert entry["Max"] == pytest.approx(expected.max(), rel=1e-6)
    assert entry["Min"] == pytest.approx(expected.min(), rel=1e-6)
    assert entry["Mean"] == pytest.approx(expected.mean(), rel=1e-6)
    assert entry["Norm"] == pytest.approx(np.linalg.norm(expected), rel=1e-6)


def test_bad_request_arguments_are_one_clear_error(tmp_path):
    from msprobe.pytorch import PrecisionDebugger

    debugger = PrecisionDebugger(config_path=write_config(tmp_path, "statistics", "L1", request_id=3))
    with pytest.raises(UsageError, match="request_id '3'.*start\\(\\) needs this forward's requests"):
        debugger.start()
    with pytest.raises(UsageError, match="2 counts for 3 request_ids"):
        debugger.start(request_ids=[1, 2, 3], scheduled_tokens=[4, 4])
    with pytest.raises(ConfigError, match="slice"):
        PrecisionDebugger(config_path=write_config(tmp_path, "statistics", "L1", slice=[{"step": 0}]))


def test_kv_cache_tensors_are_summarised_not_copied(tmp_path):
    from msprobe.pytorch import PrecisionDebugger

    class Attention(torch.nn.Module):
        def forward(self, query: torch.Tensor, past_key_values: tuple) -> tuple:
            keys = torch.cat([past_key_values[0], query], dim=0)
            return query @ keys.T, (keys,)

    debugger = PrecisionDebugger(config_path=write_config(tmp_path, "tensor"))
    attention = Attention()
    cache = torch.randn(3, 4)
    debugger.start(attention)
    attention(torch.randn(1, 4), past_key_values=(cache,))
    debugger.stop()
    debugger.step()
    data = json.loads((tmp_path / "dump" / "step0" / "rank" / "dump.json").read_text())["data"]
    module = data["Module.Attention.Attention.forward.0"]
    cached = module["input_kwargs"]["past_key_values"][0]
    assert "data_name" not in cached and cached["Max"] == pytest.approx(float(cache.max()), rel=1e-6)
    assert "data_name" in module["input_args"][0]  # the step's own query is saved as usual
    files = {path.name for path in (tmp_path / "dump" / "step0" / "rank" / "dump_tensor_data").iterdir()}
    assert not any("past_key_values" in name for name in files)


def test_a_huggingface_cache_grown_each_decode_step_is_not_saved_again(tmp_path):
    prompts = torch.randint(3, 300, (2, PROMPT), generator=torch.Generator().manual_seed(3))
    dump = generate(tmp_path / "run", prompts, level="L1")
    layers, saved_at_prefill = 2, 0
    for k in range(NEW_TOKENS):
        data = json.loads((dump / f"step{k}" / "rank" / "dump.json").read_text())["data"]
        grown = [entry for name, entry in data.items() if name.startswith("Torch.cat.")]
        assert len(grown) == 2 * layers  # keys and values of each layer
        for entry in grown:
            output = entry["output"][0]
            assert output["shape"][-2] == PROMPT + k  # the whole cache after this step
            assert isinstance(output["Max"], float) and math.isfinite(output["Max"]) and output["Max"] >= output["Min"]
            if k == 0:
                saved_at_prefill += "data_name" in output  # the prompt's own keys and values: saved
            else:
                assert "data_name" not in output and "data_name" not in entry["input_args"][0][0]
                assert "data_name" in entry["input_args"][0][1]  # the step's own key or value is saved
    assert saved_at_prefill == 2 * layers
