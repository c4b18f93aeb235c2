"""Workload W in MindSpore (PyNative, CPU): step time with each dump configuration, as a ratio.

    python bench/bench_dump_mindspore.py [--steps 16] [--only "statistics L1"] [--blocking]

A 4-layer transformer LM (vocab 512, width 128, 4 heads, sequence 64,
batch 8, AdamW) built from kernels CPU MindSpore 2.10 registers, on one
kernel thread as W is defined (MindSpore's default, 25 threads, oversubscribes
a small machine and slows the plain step, which flatters the ratios); same
targets as the PyTorch benchmark (statistics L1 <= 1.5x, mix <= 1.7x, md5 <= 2x,
tensor L1 within 1.5x of numpy.save writing the same arrays (timed in turn), overflow_check L1 <= 1.3x).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import mindspore as ms
import numpy as np
from mindspore import Tensor, mint, nn, ops

from msprobe.mindspore import PrecisionDebugger

sys.path.insert(0, str(Path(__file__).parent))
from in_turn import (
    Timing,
    add_only_option,
    chosen,
    dumped_step,
    numpy_twin,
    print_ratios,
    report_tensor_dump,
    time_in_turn,
)

VOCAB, WIDTH, HEADS, LAYERS, SEQUENCE, BATCH = 512, 128, 4, 4, 64, 8


class Layer(nn.Cell):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm((WIDTH,)), nn.LayerNorm((WIDTH,))
        self.qkv, self.out = nn.Dense(WIDTH, 3 * WIDTH), nn.Dense(WIDTH, WIDTH)
        self.fc1, self.fc2 = nn.Dense(WIDTH, 4 * WIDTH), nn.Dense(4 * WIDTH, WIDTH)

    def construct(self, x, mask):
        b, s, _ = x.shape
        q, k, v = ops.split(self.qkv(self.norm1(x)), WIDTH, axis=-1)

        def heads(t):
            return t.reshape(b, s, HEADS, WIDTH // HEADS).transpose(0, 2, 1, 3)

        scores = ops.matmul(heads(q), heads(k).transpose(0, 1, 3, 2)) / (WIDTH // HEADS) ** 0.5 + mask
        attention = ops.matmul(ops.softmax(scores, -1), heads(v)).transpose(0, 2, 1, 3).reshape(b, s, WIDTH)
        x = x + self.out(attention)
        return x + self.fc2(mint.tanh(self.fc1(self.norm2(x))))


class LanguageModel(nn.Cell):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.layers = nn.CellList([Layer() for _ in range(LAYERS)])
        self.norm = nn.LayerNorm((WIDTH,))
        self.head = nn.Dense(WIDTH, VOCAB)

    def construct(self, tokens, mask):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, mask)
        return self.head(self.norm(x))


def make_workload():
    ms.set_seed(0)
    model = LanguageModel()
    optimizer = nn.AdamWeightDecay(model.trainable_params(), learning_rate=1e-3)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, VOCAB, (BATCH, SEQUENCE + 1))
    inputs, targets = Tensor(tokens[:, :-1].astype(np.int32)), Tensor(tokens[:, 1:].astype(np.int32))
    mask = Tensor(np.triu(np.full((SEQUENCE, SEQUENCE), -1e9, np.float32), 1))
    loss_cell = nn.CrossEntropyLoss()

    def loss_fn(x, y):
        return loss_cell(model(x, mask).reshape(-1, VOCAB), y.reshape(-1))

    grad_fn = ms.value_and_grad(loss_fn, None, optimizer.parameters)

    def train_step():
        _, grads = grad_fn(inputs, targets)
        optimizer(grads)

    return model, train_step


CONFIGS = [
    ("none", None),
    ("statistics L1", {"task": "statistics", "level": "L1"}),
    ("statistics mix", {"task": "statistics", "level": "mix"}),
    ("md5 L1", {"task": "statistics", "level": "L1", "statistics": {"summary_mode": "md5"}}),
    ("tensor L1", {"task": "tensor", "level": "L1"}),
    ("overflow_check L1", {"task": "overflow_check", "level": "L1", "overflow_check": {"overflow_nums": -1}}),
]
TARGETS = {"statistics L1": 1.5, "statistics mix": 1.7, "md5 L1": 2.0, "overflow_check L1": 1.3}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=16)
    add_only_option(parser)
    parser.add_argument(
        "--blocking",
        action="store_true",
        help="run operations synchronously (ms.runtime.launch_blocking()), not in MindSpore's asynchronous pipeline",
    )
    args = parser.parse_args()
    configs = chosen(parser, args.only, CONFIGS)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    ms.device_context.cpu.op_tuning.threads_num(1)  # workload W runs on one thread (MindSpore's default: 25)
    if args.blocking:
        ms.runtime.launch_blocking()
    folder = Path(tempfile.mkdtemp(prefix="msprobe_ms_bench_"))
    timings: dict[str, Timing] = {}
    for label, config in configs:
        model, train_step = make_workload()
        _plain_model, plain_step = make_workload()  # stepped in turn with the dumped one: drifts hit both
        debugger = yardstick = None
        if config is not None:
            dump_path = folder / label.replace(" ", "_")
            path = folder / f"{label.replace(' ', '_')}.json"
            path.write_text(json.dumps({**config, "dump_path": str(dump_path)}))
            debugger = PrecisionDebugger(config_path=str(path), model=model)
            if config["task"] == "tensor":
                tensor_dir = dump_path / "step0" / "rank" / "dump_tensor_data"
                yardstick = numpy_twin(plain_step, functools.partial(_saved_arrays, tensor_dir), folder / "numpy_copy")
        between = os.sync if yardstick is not None else None  # no writeback of earlier files during a timed step
        timings[label] = time_in_turn(plain_step, dumped_step(debugger, train_step), args.steps, yardstick, between)
        os.sync()  # the tensor dump's dirty pages would otherwise be written back during the next runs
    print_ratios(timings, TARGETS)
    if "tensor L1" in timings:
        report_tensor_dump(timings["tensor L1"], folder / "numpy_copy")
    shutil.rmtree(folder, ignore_errors=True)


def _saved_arrays(tensor_dir: Path) -> list[np.ndarray]:
    return [np.load(path) for path in sorted(tensor_dir.glob("*.npy"))]


if __name__ == "__main__":
    main()
