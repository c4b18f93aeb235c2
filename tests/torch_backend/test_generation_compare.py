"""Comparing two generations token by token, and dumping them a decode step at a time: a fault injected into one
layer at decode step k is found at token k, and in the dumps at step k and that layer's call; a golden pair
agrees. Scored over many faults of several kinds, places and steps."""

from __future__ import annotations

import json
import random

import pytest
import torch

transformers = pytest.importorskip("transformers")

from click.testing import CliRunner  # noqa: E402

from msprobe.cli.main import cli  # noqa: E402
from msprobe.core.generation.compare import TOLERANCE, compare_generations  # noqa: E402
from msprobe.core.generation.responses import Response  # noqa: E402

NEW_TOKENS = 16


def tiny_model(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "gpt2":
        config = transformers.GPT2Config(
            n_layer=4, n_embd=64, n_head=4, vocab_size=500, n_positions=128, bos_token_id=1, eos_token_id=2
        )
        return transformers.GPT2LMHeadModel(config).eval()
    config = transformers.LlamaConfig(
        num_hidden_layers=4, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=500, max_position_embeddings=128, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config).eval()


def layers_of(model: torch.nn.Module) -> torch.nn.ModuleList:
    return model.transformer.h if hasattr(model, "transformer") else model.model.layers


def generate(model, prompts: torch.Tensor, fault=None) -> list[Response]:
    """Greedy generation of each prompt, with its chosen tokens' log-probabilities and top-5 candidates."""
    handle = None
    if fault is not None:
        layer, step, change = fault
        calls = {"count": 0}

        def hook(_module, _inputs, output):
            calls["count"] += 1  # the layer runs once per forward: prefill is step 0, each decode step the next
            if calls["count"] - 1 != step:
                return None
            hidden = output[0] if isinstance(output, tuple) else output
            changed = change(hidden.clone())
            return (changed, *output[1:]) if isinstance(output, tuple) else changed

        handle = layers_of(model)[layer].register_forward_hook(hook)
    try:
        with torch.no_grad():
            out = model.generate(prompts, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                                 output_logits=True, return_dict_in_generate=True, pad_token_id=0)  # fmt: skip
    finally:
        if handle is not None:
            handle.remove()
    responses = []
    new = out.sequences[:, prompts.shape[1] :]
    # the model's own logits, before generate's processors (min_new_tokens masks the end token)
    logprobs = torch.stack([torch.log_softmax(logit.double(), dim=-1) for logit in out.logits], dim=1)
    for row in range(prompts.shape[0]):
        chosen = logprobs[row].gather(1, new[row].unsqueeze(1)).squeeze(1)
        top = torch.topk(logprobs[row], 5, dim=-1)
        tops = [dict(zip(i.tolist(), v.tolist())) for i, v in zip(top.indices, top.values)]
        responses.append(Response(f"req-{row}", new[row].tolist(), chosen.tolist(), None, tops))
    return responses


FAULTS = {
    "scale": lambda hidden: hidden * 1.25,
    "noise": lambda hidden: hidden + 0.05 * torch.randn(hidden.shape, generator=torch.Generator().manual_seed(1)),
    "one feature": lambda hidden: hidden.index_fill(-1, torch.tensor([3]), 4.0),
}


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_a_decode_fault_is_found_at_its_token_and_a_golden_pair_agrees(kind):
    model = tiny_model(kind)
    prompts = torch.randint(1, 500, (2, 6), generator=torch.Generator().manual_seed(5))
    golden = generate(model, prompts)
    _, answers, unmatched = compare_generations(golden, generate(model, prompts))
    assert unmatched == 0 and all(answer.agrees for answer in answers)  # negative control
    rng = random.Random(11)
    cases = found = unseen = 0
    for change in FAULTS.values():
        for layer in range(4):
            step = rng.randrange(1, NEW_TOKENS)  # a decode step (0 is the prefill)
            faulty = generate(model, prompts, (layer, step, change))
            _, answers, _ = compare_generations(golden, faulty)
            for answer, before, after in zip(answers, golden, faulty):
                if max(abs(a - b) for a, b in zip(before.logprobs, after.logprobs)) <= TOLERANCE:
                    # the fault changed no output beyond the tolerance (a norm after it undoes a uniform scale)
                    unseen += 1
                    assert answer.agrees
                    continue
                cases += 1
                found += answer.first_logprob == step and (answer.first_token is None or answer.first_token >= step)
    print(f"\n{kind}: decode faults found at their token: {found}/{cases} ({unseen} within the tolerance)")
    assert cases >= 18 and found == cases


def test_compare_reads_two_files_of_responses_and_says_where_they_part(tmp_path):
    model = tiny_model("gpt2")
    prompts = torch.randint(1, 500, (3, 5), generator=torch.Generator().manual_seed(2))
    golden, faulty = generate(model, prompts), generate(model, prompts, (2, 4, FAULTS["scale"]))
    for name, responses in (("a", golden), ("b", faulty), ("c", golden)):
        lines = [json.dumps({"id": r.name, "tokens": r.tokens, "logprobs": r.logprobs,
                             "top_logprobs": [[[t, v] for t, v in top.items()] for top in r.top_logprobs]})
                 for r in responses]  # fmt: skip
        (tmp_path / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    runner = CliRunner()
    (tmp_path / "same.json").write_text(json.dumps({"npu_path": str(tmp_path / "a.jsonl"),
                                                    "bench_path": str(tmp_path / "c.jsonl")}))  # fmt: skip
    same = runner.invoke(cli, ["compare", "-i", str(tmp_path / "same.json"), "-o", str(tmp_path / "o1")])
    assert same.exit_code == 0, same.output
    assert "PASS" in same.output and "3 request(s) agree" in same.output
    (tmp_path / "diff.json").write_text(json.dumps({"npu_path": str(tmp_path / "b.jsonl"),
                                                    "bench_path": str(tmp_path / "a.jsonl")}))  # fmt: skip
    diff = runner.invoke(cli, ["compare", "-i", str(tmp_path / "diff.json"), "-o", str(tmp_path / "o2")])
    assert diff.exit_code == 1, diff.output
    assert "req-0: log-probabilities part ways at token 4" in diff.output
    (table,) = (tmp_path / "o2").glob("generation_compare_*.csv")
    rows = [line.split(",") for line in table.read_text().splitlines()]
    assert rows[0][:3] == ["Response", "Position", "NPU Token"]
    first = [row for row in rows[1:] if row[0] == "req-0"]
    assert [row[-1] for row in first[:4]] == ["pass"] * 4 and first[4][-1] in ("logprob differs", "token differs")
    assert float(first[0][7]) == 1.0  # the same top-5 candidates before the fault


class Gelu(torch.nn.Module):
    """GPT-2's activation as one call, which at ``bad_step`` runs the exact GELU instead of the tanh form: a
    kernel that computes something else for one token."""

    def __init__(self, bad_step: int | None = None):
        super().__init__()
        self.calls, self.bad_step = 0, bad_step

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bad = self.calls == self.bad_step
        self.calls += 1
        return torch.nn.functional.gelu(x, approximate="none" if bad else "tanh")


def dump_generate(root, layer: int = 0, bad_step: int | None = None, per: str = "token", new_tokens: int = 8):
    from msprobe.pytorch import PrecisionDebugger, dump_generation

    model = tiny_model("gpt2")
    for index, block in enumerate(model.transformer.h):
        block.mlp.act = Gelu(bad_step if index == layer else None)
    prompts = torch.randint(1, 500, (2, 6), generator=torch.Generator().manual_seed(5))
    debugger = PrecisionDebugger(task="statistics", level="mix", dump_path=str(root))
    with dump_generation(debugger, model, per=per), torch.no_grad():
        model.generate(prompts, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    assert not model._forward_hooks and not model._forward_pre_hooks and "generate" not in vars(model)
    return model


def test_a_decode_fault_is_named_at_its_step_layer_and_call_in_the_dumps(tmp_path):
    from msprobe.core.diagnosis import diagnose_runs

    dump_generate(tmp_path / "golden")
    steps = sorted(path.name for path in (tmp_path / "golden").iterdir())
    assert steps == [f"step{k}" for k in range(8)]  # prefill, then one step per decode step; none empty
    assert all(json.loads((tmp_path / "golden" / s / "rank" / "dump.json").read_text())["data"] for s in steps)
    assert diagnose_runs(tmp_path / "golden", tmp_path / "golden").verdict == "none"  # negative control
    cases = named = 0
    for layer in range(4):
        for step in (1 + layer, 7 - layer):
            dump_generate(tmp_path / f"f{layer}_{step}", layer, step)
            answer = diagnose_runs(tmp_path / f"f{layer}_{step}", tmp_path / "golden")
            cases += 1
            named += (answer.step, answer.module, (answer.api or "").split(".")[:2]) == (
                step, f"transformer.h.{layer}.mlp.act", ["Functional", "gelu"]
            )  # fmt: skip
    print(f"\ndecode faults named at their step, layer and call in the dumps: {named}/{cases}")
    assert named == cases


def test_the_serving_docs_compare_of_two_generation_dumps_names_the_token(tmp_path):
    """docs/serving.md's command: compare.json names the two dump_path folders of dump_generation."""
    from click.testing import CliRunner

    from msprobe.cli.main import cli

    dump_generate(tmp_path / "dump_bench", new_tokens=6)
    dump_generate(tmp_path / "dump_npu", layer=2, bad_step=4, new_tokens=6)
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(tmp_path / "dump_npu"), "bench_path": str(tmp_path / "dump_bench")}))
    result = CliRunner().invoke(cli, ["compare", "-i", str(spec), "-o", str(tmp_path / "out"), "--first-divergence"])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert [line.split(":")[0] for line in lines[:6]] == [f"step {k}" for k in range(6)]
    assert all(line.startswith(f"step {k}: PASS") for k, line in enumerate(lines[:4]))
    assert lines[4].startswith("step 4: SUSPICIOUS")
    (answer,) = [line for line in lines if line.startswith("all steps: ")]
    assert "Functional.gelu." in answer and "(step 4, forward, module transformer.h.2.mlp.act)" in answer
    assert "approximate" in answer


def test_one_step_per_request_is_a_choice(tmp_path):
    dump_generate(tmp_path / "r", per="request", new_tokens=4)
    assert sorted(path.name for path in (tmp_path / "r").iterdir()) == ["step0"]
    data = json.loads((tmp_path / "r" / "step0" / "rank" / "dump.json").read_text())["data"]
    assert sum(name.startswith("Module.transformer.GPT2Model.forward.") for name in data) == 4  # four forwards


def test_an_unknown_per_is_one_clear_error(tmp_path):
    from msprobe.core.errors import UsageError
    from msprobe.pytorch import PrecisionDebugger, dump_generation

    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path))
    with (
        pytest.raises(UsageError, match="'token' or 'request', not 'batch'"),
        dump_generation(debugger, torch.nn.Linear(1, 1), per="batch"),
    ):
        pass


def _write(path, responses: list[Response]) -> None:
    path.write_text("".join(json.dumps({"id": r.name, "tokens": r.tokens, "logprobs": r.logprobs}) + "\n"
                            for r in responses))  # fmt: skip


def test_train_infer_consistency_finds_where_a_training_forward_departs(tmp_path):
    """The same tokens scored by generate (KV cache) and by a teacher-forced forward agree within the tolerance;
    a training forward wrong from one position on is found at that token, for each layer and several places."""
    from msprobe.pytorch.generation import teacher_forced_logprobs

    model = tiny_model("gpt2")
    prompts = torch.randint(1, 500, (2, 6), generator=torch.Generator().manual_seed(9))
    inferred = generate(model, prompts)
    sequences = torch.cat([prompts, torch.tensor([r.tokens for r in inferred])], dim=1)

    def trained(fault=None) -> list[Response]:
        handle = None
        if fault is not None:
            layer, position = fault

            def hook(_module, _inputs, output):
                hidden = (output[0] if isinstance(output, tuple) else output).clone()
                hidden[:, prompts.shape[1] + position - 1 :] *= 1.3  # from the state that predicts token `position`
                return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

            handle = layers_of(model)[layer].register_forward_hook(hook)
        try:
            scores = teacher_forced_logprobs(model, sequences, prompts.shape[1])
        finally:
            if handle is not None:
                handle.remove()
        return [Response(r.name, r.tokens, s) for r, s in zip(inferred, scores)]

    _write(tmp_path / "infer.jsonl", inferred)
    _write(tmp_path / "train.jsonl", trained())
    (tmp_path / "c.json").write_text(json.dumps({"npu_path": str(tmp_path / "train.jsonl"),
                                                 "bench_path": str(tmp_path / "infer.jsonl")}))  # fmt: skip
    runner = CliRunner()
    clean = runner.invoke(cli, ["compare", "-i", str(tmp_path / "c.json"), "-o", str(tmp_path / "o"),
                                "--consistent_check"])  # fmt: skip
    assert clean.exit_code == 0, clean.output
    assert f"train/infer: 0 of {2 * NEW_TOKENS} tokens differ by more than 0.001 nats" in clean.output
    cases = found = 0
    for layer in range(4):
        for position in (2, 9):
            _write(tmp_path / "train.jsonl", trained((layer, position)))
            result = runner.invoke(cli, ["compare", "-i", str(tmp_path / "c.json"), "-o", str(tmp_path / "o"),
                                         "--consistent_check"])  # fmt: skip
            assert result.exit_code == 1, result.output
            cases += 2
            found += result.output.count(f"log-probabilities part ways at token {position} ")
    print(f"\ntrain/infer: training faults found at their token: {found}/{cases}")
    assert found == cases


def test_the_consistency_check_refuses_different_tokens(tmp_path):
    _write(tmp_path / "a.jsonl", [Response("r", [1, 2, 3], [-0.1, -0.1, -0.1])])
    _write(tmp_path / "b.jsonl", [Response("r", [1, 5, 3], [-0.1, -0.1, -0.1])])
    (tmp_path / "c.json").write_text(json.dumps({"npu_path": str(tmp_path / "a.jsonl"),
                                                 "bench_path": str(tmp_path / "b.jsonl")}))  # fmt: skip
    result = CliRunner().invoke(cli, ["compare", "-i", str(tmp_path / "c.json"), "-o", str(tmp_path / "o"),
                                      "--consistent_check"])  # fmt: skip
    assert result.exit_code == 2 and "request r: the tokens differ at token 1" in result.output
