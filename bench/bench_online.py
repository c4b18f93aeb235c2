"""Online pre-check cost: training step time with streaming to a local receiver, and the receiver's rate.

python bench/bench_online.py [--steps 4]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from workload import make_workload

from msprobe.pytorch import PrecisionDebugger


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)
    folder = Path(tempfile.mkdtemp(prefix="msprobe_online_"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (folder / "recv.json").write_text(json.dumps({"task": "run_ut", "run_ut": {
        "is_online": True, "host": "127.0.0.1", "port": port, "rank_list": [0], "tls_path": ""}}))  # fmt: skip
    (folder / "send.json").write_text(json.dumps({"task": "tensor", "dump_path": str(folder / "unused"),
                                                  "level": "L1", "tensor": {"online_run_ut": True,
                                                  "host": "127.0.0.1", "port": port, "tls_path": ""}}))  # fmt: skip
    receiver = subprocess.Popen([sys.executable, "-m", "msprobe.cli.main", "-f", "pytorch", "run_ut", "-config",
                                 str(folder / "recv.json"), "-o", str(folder / "out")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    time.sleep(5)
    model, train_step = make_workload()
    train_step()
    plain = []
    for _ in range(args.steps):
        start = time.perf_counter()
        train_step()
        plain.append(time.perf_counter() - start)
    debugger = PrecisionDebugger(config_path=str(folder / "send.json"), model=model)
    online = []
    for _ in range(args.steps):
        start = time.perf_counter()
        debugger.start()
        train_step()
        debugger.stop()
        debugger.step()
        online.append(time.perf_counter() - start)
    sender = debugger._hooks.sender
    sent_at = time.perf_counter()
    debugger.finish()
    receiver.wait(timeout=1800)
    drained = time.perf_counter() - sent_at
    summary = json.loads(next((folder / "out").glob("online_summary_*.json")).read_text())
    base = min(plain)
    print(f"training step: {min(online) * 1000:.0f} ms with online pre-check vs {base * 1000:.0f} ms plain: "
          f"{min(online) / base:.1f}x; {sender.sent} APIs sent, {sender.dropped} dropped")  # fmt: skip
    total = sum(online) + drained
    print(f"receiver: {summary['checked']} APIs checked; all done {drained:.1f} s after training ended "
          f"({summary['checked'] / total:.0f} APIs/s over the run, 2 worker processes)")  # fmt: skip


if __name__ == "__main__":
    main()
