"""One rank of the two-rank MindSpore tests (started by test_monitor_ranks.py, not collected)."""

import json
import sys

import mindspore as ms
import numpy as np
from mindspore import nn
from mindspore.communication import get_rank, init

from msprobe.mindspore import PrecisionDebugger, TrainerMon


def main(folder: str) -> None:
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    rank = get_rank()
    net = nn.Dense(6, 2, weight_init="ones", bias_init="zeros")
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.1)
    monitor = TrainerMon(f"{folder}/m.json", params_have_main_grad=False)
    monitor.set_monitor(net, grad_acc_steps=2, optimizer=optimizer)
    grad_fn = ms.value_and_grad(lambda x: (net(x) ** 2).sum(), None, optimizer.parameters)
    reducer = nn.DistributedGradReducer(optimizer.parameters, mean=True)
    rng = np.random.default_rng(10 + rank)  # each rank its own data
    local = None
    for _ in range(2):  # two micro-batches per step
        _, grads = grad_fn(ms.Tensor(rng.standard_normal((4, 6)).astype(np.float32)))
        local = grads if local is None else tuple(a + b for a, b in zip(local, grads))
    reduced = reducer(local)
    optimizer(reduced)
    monitor.finish()
    expected = {
        "local": float(np.linalg.norm(local[0].asnumpy())),
        "reduced": float(np.linalg.norm(reduced[0].asnumpy())),
    }
    with open(f"{folder}/expected{rank}.json", "w") as handle:
        json.dump(expected, handle)
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=f"{folder}/dump")  # rank folders
    debugger.start()
    net(ms.Tensor(np.ones((2, 6), np.float32)))
    debugger.stop()
    debugger.step()


if __name__ == "__main__":
    main(sys.argv[1])
