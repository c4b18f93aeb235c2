"""``msprobe run -c config.json -- python train.py``: scripts with no msprobe in them, dumped step by step."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from dump_values import leaves

BIN = Path(sys.executable).parent

TRAIN = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    x = torch.randn(5, 4)
    model(x).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
print("trained")
"""

DDP = """
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    x = torch.randn(5, 4) + dist.get_rank()
    model(x).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
dist.destroy_process_group()
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def config(folder: Path, **fields) -> Path:
    data = {"task": "statistics", "dump_path": str(folder / "dump"), "level": "mix", "rank": [], "step": []}
    return write(folder, "config.json", json.dumps({**data, **fields}))


def msprobe_run(folder: Path, *command: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key not in ("MSPROBE_DISABLE_PLUGINS",)}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(env_extra or {})
    return subprocess.run(
        [str(BIN / "msprobe"), "run", "-c", str(folder / "config.json"), "--", *command],
        cwd=folder, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def dumped(folder: Path) -> dict[str, dict]:
    """step/rank folder -> its dump.json's data."""
    return {
        f"{path.parent.parent.name}/{path.parent.name}": json.loads(path.read_text())["data"]
        for path in sorted((folder / "dump").glob("step*/*/dump.json"))
    }


def statistics(values: torch.Tensor) -> dict:
    return {"Max": values.max().item(), "Min": values.min().item(), "Mean": values.mean().item()}


def close(entry: dict, expected: dict) -> bool:
    return all(abs(entry[key] - value) <= 1e-5 * max(1.0, abs(value)) for key, value in expected.items())


def test_an_unchanged_script_is_dumped_one_step_per_optimizer_step(tmp_path):
    script = write(tmp_path, "train.py", TRAIN)
    config(tmp_path)
    finished = msprobe_run(tmp_path, sys.executable, str(script))
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.strip() == "trained"
    assert "msprobe" not in script.read_text()
    dumps = dumped(tmp_path)
    assert list(dumps) == ["step0/rank", "step1/rank", "step2/rank"]  # three optimizer steps, no empty fourth
    for data in dumps.values():
        names = set(data)
        assert {"Module.0.Linear.forward.0", "Module.1.ReLU.forward.0", "Module.2.Linear.backward.0"} <= names
        assert {"Functional.linear.0.forward", "Functional.relu.0.backward", "Module.0.Linear.parameters_grad"} <= names
        # SGD's update of the four parameters falls inside the step, as with start() ... step() around it
        assert {f"Tensor.add_.{n}.forward" for n in range(4)} <= names
    # each step's input is the script's own: the same seed replayed here gives the same statistics
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        x = torch.randn(5, 4)
        hidden = model[0](x)
        entry = dumps[f"step{step}/rank"]["Module.0.Linear.forward.0"]
        assert close(entry["input_args"][0], statistics(x))
        assert close(entry["output"][0], statistics(hidden.detach()))
        model(x).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    assert "the dump is in" in finished.stderr


def test_torchrun_with_two_processes_dumps_both_ranks(tmp_path, free_port):
    script = write(tmp_path, "ddp.py", DDP)
    config(tmp_path, level="L0")
    finished = msprobe_run(
        tmp_path, str(BIN / "torchrun"), "--nproc_per_node", "2", "--master_port", free_port, str(script)
    )
    assert finished.returncode == 0, finished.stderr
    dumps = dumped(tmp_path)
    assert list(dumps) == ["step0/rank0", "step0/rank1", "step1/rank0", "step1/rank1"]  # the launcher wrote none
    for rank in (0, 1):  # rank r's input is the shared random batch plus r
        torch.manual_seed(0)
        torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        x = torch.randn(5, 4) + rank
        entry = dumps[f"step0/rank{rank}"]["Module.module.0.Linear.forward.0"]
        assert close(entry["input_args"][0], statistics(x))
        assert not any(name.startswith(("Functional.", "Tensor.", "Torch.")) for name in dumps[f"step0/rank{rank}"])
    # each process's last line says which rank's part of the job it counts; the launcher says nothing
    lines = [line for line in finished.stderr.splitlines() if "the dump is in" in line]
    assert sorted(line.split("(")[1].split(")")[0] for line in lines) == ["rank 0's part", "rank 1's part"]
    assert "dumped nothing" not in finished.stderr


def test_a_script_with_its_own_debugger_keeps_it(tmp_path):
    own = tmp_path / "own"
    script = write(
        tmp_path,
        "train.py",
        f"""
        import torch
        from msprobe.pytorch import PrecisionDebugger
        debugger = PrecisionDebugger(task="statistics", level="L1", dump_path={str(own)!r})
        model = torch.nn.Linear(4, 2)
        for _ in range(2):
            debugger.start()
            model(torch.randn(3, 4)).sum().backward()
            debugger.stop()
            debugger.step()
    """,
    )
    config(tmp_path)
    finished = msprobe_run(tmp_path, sys.executable, str(script))
    assert finished.returncode == 0, finished.stderr
    assert "leaves the dump to it" in finished.stderr
    assert not (tmp_path / "dump").exists() or not list((tmp_path / "dump").iterdir())
    assert sorted(p.parent.parent.name for p in own.glob("step*/rank/dump.json")) == ["step0", "step1"]


def test_dataloader_workers_write_nothing(tmp_path):
    script = write(
        tmp_path,
        "loader.py",
        """
        import torch
        class Data(torch.utils.data.Dataset):
            scale = torch.nn.Linear(4, 4)  # a module the workers call
            def __len__(self):
                return 8
            def __getitem__(self, index):
                with torch.no_grad():
                    return self.scale(torch.full((4,), float(index)))
        if __name__ == "__main__":
            torch.manual_seed(0)
            model = torch.nn.Linear(4, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(2):  # the second epoch forks its workers after a dumped step
                for batch in torch.utils.data.DataLoader(Data(), batch_size=4, num_workers=2):
                    model(batch).sum().backward()
                    optimizer.step()
                    optimizer.zero_grad()
    """,
    )
    config(tmp_path, task="tensor")  # tensor files are written as calls happen: a worker's would show
    finished = msprobe_run(tmp_path, sys.executable, str(script))
    assert finished.returncode == 0, finished.stderr
    dumps = dumped(tmp_path)
    assert list(dumps) == [f"step{n}/rank" for n in range(4)]
    for step, data in dumps.items():
        named = {item["data_name"] for entry in data.values() for item in leaves(entry) if "data_name" in item}
        written = {path.name for path in (tmp_path / "dump" / step / "dump_tensor_data").iterdir()}
        assert written == named
    for data in dumps.values():
        modules = sorted(name.rsplit(".", 2)[-2] for name in data if name.startswith("Module."))
        assert modules == ["Linear", "backward", "forward"]  # the model's one call; a worker's would add more
        assert sum(name.startswith("Functional.linear.") and name.endswith(".forward") for name in data) == 1


def test_another_sitecustomize_still_runs(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    write(site, "sitecustomize.py", f"open({str(tmp_path / 'marker')!r}, 'w').write('ran')\n")
    script = write(tmp_path, "train.py", TRAIN)
    config(tmp_path)
    finished = msprobe_run(tmp_path, sys.executable, str(script), env_extra={"PYTHONPATH": str(site)})
    assert finished.returncode == 0, finished.stderr
    assert (tmp_path / "marker").read_text() == "ran"
    assert len(dumped(tmp_path)) == 3


def test_the_exit_status_is_the_commands(tmp_path):
    script = write(tmp_path, "fails.py", "import torch\nraise SystemExit(3)\n")
    config(tmp_path)
    assert msprobe_run(tmp_path, sys.executable, str(script)).returncode == 3


@pytest.mark.parametrize(
    "fields, command, message",
    [
        ({"level": "L9"}, [sys.executable, "-c", "pass"], "level"),
        ({}, ["no-such-command-here"], "command not found: no-such-command-here"),
    ],
)
def test_bad_input_is_told_before_the_job_starts(tmp_path, fields, command, message):
    config(tmp_path, **fields)
    finished = msprobe_run(tmp_path, *command)
    assert finished.returncode == 2
    assert message in finished.stderr and "Traceback" not in finished.stderr
    if fields:
        assert "config.json" in finished.stderr


@pytest.mark.parametrize("blocked", ["dump", "dump/deeper"])
def test_a_dump_path_that_cannot_be_a_folder_is_told_before_the_job_starts(tmp_path, blocked):
    """A file where the dump's folder (or one above it) would be: each process would stop dumping and train
    on, and the job would end with no dump and exit 0. `config validate` says so too."""
    (tmp_path / "dump").write_text("a file")
    config(tmp_path, dump_path=str(tmp_path / blocked))
    started = tmp_path / "started"
    finished = msprobe_run(tmp_path, sys.executable, "-c", f"open({str(started)!r}, 'w')")
    assert finished.returncode == 2 and not started.exists()
    assert "config.json: dump_path: " in finished.stderr and "is a file" in finished.stderr
    checked = subprocess.run([str(BIN / "msprobe"), "config", "validate", str(tmp_path / "config.json")],
                             capture_output=True, text=True)  # fmt: skip
    assert checked.returncode == 2 and "dump_path: " in checked.stderr and "is a file" in checked.stderr


def test_a_process_that_calls_no_module_says_it_dumped_nothing(tmp_path):
    script = write(tmp_path, "no_module.py", "import torch\nx = torch.ones(3) * 2\nprint(float(x.sum()))\n")
    config(tmp_path)
    finished = msprobe_run(tmp_path, sys.executable, str(script))
    assert finished.returncode == 0 and "6.0" in finished.stdout
    assert "msprobe run dumped nothing in this process: no torch.nn.Module was called" in finished.stderr
    assert not (tmp_path / "dump").exists() or not list((tmp_path / "dump").rglob("dump.json"))


SIGNALLED = """
import signal, sys, time, pathlib
import torch
out = pathlib.Path(sys.argv[1])
def on_term(signum, frame):
    out.write_text("terminated")
    sys.exit(7)
signal.signal(signal.SIGTERM, on_term)
(out.parent / "ready").write_text("ready")
try:
    # short sleeps: a signal that lands between "ready" and the start of one long sleep would only be seen
    # when that sleep ends (the handler runs at the next bytecode, after the system call)
    for _ in range(600):
        time.sleep(0.1)
except KeyboardInterrupt:
    time.sleep(1.0)  # a cleanup that takes its time: msprobe run must not cut it short
    out.write_text("interrupted, cleaned up")
    sys.exit(130)
"""


def test_a_list_that_matches_nothing_says_so_in_msprobe_run_s_words(tmp_path):
    """No start() or stop() in the script: the warning speaks of the steps msprobe run dumped, and each step's
    folder holds an empty dump.json, as the reference leaves it."""
    script = write(tmp_path, "train.py", """
        import torch
        net = torch.nn.Linear(4, 2)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        for _ in range(2):
            net(torch.randn(3, 4)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
    """)  # fmt: skip
    config(tmp_path, level="L1", statistics={"list": ["Functional.nosuch"]})
    finished = msprobe_run(tmp_path, sys.executable, str(script))
    assert finished.returncode == 0, finished.stderr
    assert "list ['Functional.nosuch'] matched no call in the 2 steps msprobe run dumped" in finished.stderr
    assert "start()" not in finished.stderr
    assert dumped(tmp_path) == {"step0/rank": {}, "step1/rank": {}}


@pytest.mark.parametrize("how", ["SIGTERM to msprobe run", "Ctrl-C to the job"])
def test_signals_reach_the_job_and_it_ends_in_its_own_time(tmp_path, how):
    import signal
    import time

    script = write(tmp_path, "signalled.py", SIGNALLED)
    config(tmp_path)
    env = {key: value for key, value in os.environ.items() if key != "MSPROBE_DISABLE_PLUGINS"}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    command = [str(BIN / "msprobe"), "run", "-c", str(tmp_path / "config.json"), "--", sys.executable, str(script)]
    # Ctrl-C as a terminal delivers it: a test run started in the background (a shell's `&`) ignores SIGINT,
    # and an ignored SIGINT is inherited by every process it starts, the job's Python then installing no handler;
    # a handler of this process's own is not inherited, so msprobe run starts with SIGINT's default
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = subprocess.Popen([*command, str(tmp_path / "out")], cwd=tmp_path, env=env, start_new_session=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, previous)
    deadline = time.monotonic() + 60
    while not (tmp_path / "ready").exists():  # the job is running, its handler in place
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    if how.startswith("SIGTERM"):
        process.send_signal(signal.SIGTERM)  # to msprobe run alone, as a scheduler sends it
        expected, words = 7, "terminated"
    else:
        os.killpg(process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole group
        expected, words = 130, "interrupted, cleaned up"
    process.communicate(timeout=60)
    assert process.returncode == expected
    assert (tmp_path / "out").read_text() == words


ONE_STEP = """
import sys, torch
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.ones(3, 4) * float(sys.argv[1])).sum().backward()
optimizer.step()
"""

POOL = """
import multiprocessing as mp, torch

def work(scale):
    return float(torch.nn.Linear(4, 2)(torch.ones(1, 4) * scale).sum())

if __name__ == "__main__":
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(3, 4)).sum().backward()
    with mp.get_context("spawn").Pool(2) as pool:  # helpers started while the step is dumped
        print(pool.map(work, [1.0, 2.0]))
    optimizer.step()
"""


def test_two_programs_of_one_job_keep_both_dumps(tmp_path):
    """bash -c "python a.py && python b.py": the second program overwrote the first's dump.json."""
    script = write(tmp_path, "one_step.py", ONE_STEP)
    config(tmp_path)
    line = f"{sys.executable} {script} 1 && {sys.executable} {script} 2"
    finished = msprobe_run(tmp_path, "bash", "-c", line)
    assert finished.returncode == 0, finished.stderr
    first = json.loads((tmp_path / "dump" / "step0" / "rank" / "dump.json").read_text())["data"]
    [second_json] = (tmp_path / "dump").glob("one_step.*/step0/rank/dump.json")
    second = json.loads(second_json.read_text())["data"]
    assert first["Functional.linear.0.forward"]["input_args"][0]["Max"] == 1.0  # the first program's input
    assert second["Functional.linear.0.forward"]["input_args"][0]["Max"] == 2.0
    assert "holds the dump of another program of this job" in finished.stderr


def test_a_spawn_pool_s_workers_write_nothing_into_the_dumping_process_s_step(tmp_path):
    """Workers of a spawn pool call a module while their parent dumps: their entries went into the parent's
    journal (1 MiB left behind) and were lost; they are helpers, and write nothing."""
    script = write(tmp_path, "pool.py", POOL)
    config(tmp_path)
    finished = msprobe_run(tmp_path, sys.executable, str(script))
    assert finished.returncode == 0, finished.stderr
    step = tmp_path / "dump" / "step0" / "rank"
    assert not (step / ".dump.json.journal").exists() and list(step.iterdir())
    names = json.loads((step / "dump.json").read_text())["data"]
    # the parent's one forward; a worker's linear would be one more (the parent's count goes on in the journal)
    assert [name for name in names if name.startswith("Functional.linear.")] == [
        "Functional.linear.0.forward",
        "Functional.linear.0.backward",
    ]
    assert "dumped nothing" not in finished.stderr


TWO_OPTIMIZERS = """
import torch
torch.manual_seed(0)
first, second = torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)
one, two = torch.optim.SGD(first.parameters(), lr=0.1), torch.optim.SGD(second.parameters(), lr=0.1)
for _ in range(2):
    first(torch.randn(3, 4)).sum().backward()
    one.step()
    second(torch.randn(3, 4)).sum().backward()
    two.step()
"""


def test_a_second_optimizer_is_told_to_end_no_dump_step(tmp_path):
    """The first optimizer to step ends each dump step (docs/dump_pytorch.md): the second one's update falls
    in the step after it, and the run says so once."""
    script = write(tmp_path, "train.py", TWO_OPTIMIZERS)
    config(tmp_path, level="L1")
    finished = msprobe_run(tmp_path, sys.executable, str(script))
    assert finished.returncode == 0, finished.stderr
    assert finished.stderr.count("steps more than one optimizer") == 1
    dumps = dumped(tmp_path)
    # step 0: the first model and its optimizer; step 1: the second's forward, from its module call on
    assert list(dumps) == ["step0/rank", "step1/rank", "step2/rank"]
    first_linear = [name for name in dumps["step0/rank"] if name.startswith("Functional.linear.")]
    assert first_linear == ["Functional.linear.0.forward", "Functional.linear.0.backward"]
