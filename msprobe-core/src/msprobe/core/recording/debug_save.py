"""``PrecisionDebugger.save``: keep any variable (and optionally its gradient) in debug.json.

Level ``debug`` of the reference. Each call with the same name counts up;
nested lists and dicts are kept whole; with task ``tensor`` each tensor is
also written as ``{name}{_grad}.{count}.tensor.{index path}{suffix}``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from msprobe.core.dump.values import ValueEncoder
from msprobe.core.dump.writer import DumpWriter
from msprobe.core.files import make_dir
from msprobe.core.recording.session import TaskSession

# register_grad(value, name, callback): arrange for callback(gradient structure) once the gradient exists
GradRegistrar = Callable[[Any, Callable[[Any], None]], bool]


class DebugSaver:
    def __init__(
        self, session: TaskSession, encoder: ValueEncoder, set_tensor_dir: Callable, register_grad: GradRegistrar
    ):
        self.session = session
        self.encoder = encoder
        self.set_tensor_dir = set_tensor_dir
        self.register_grad = register_grad
        self.counts: dict[str, int] = defaultdict(int)
        self.writer: DumpWriter | None = None
        self.step = -1

    def _open(self) -> DumpWriter:
        step = self.session.step
        if self.writer is None or step != self.step:
            if self.writer is not None:
                self.writer.close()
            self.step = step
            self.counts.clear()
            folder = self.session.dump_dir
            tensor_dir = folder / "dump_tensor_data" if self.session.task == "tensor" else None
            header = {
                "task": self.session.task,
                "level": "debug",
                "framework": self.session.framework,
                "dump_data_dir": str(tensor_dir) if tensor_dir else None,
            }
            self.writer = DumpWriter(folder, header, file_name="debug.json")
            if tensor_dir is not None:
                make_dir(tensor_dir)
            self.set_tensor_dir(tensor_dir)
        return self.writer

    def save(self, variable: Any, name: str, save_backward: bool = True) -> None:
        writer = self._open()
        count = self.counts[name]
        self.counts[name] = count + 1
        writer.add(f"{name}.{count}.debug", self.encoder.encode(variable, f"{name}.{count}.tensor"))
        writer.flush()
        if save_backward:
            step = self.step

            def on_grad(gradient: Any) -> None:
                if step != self.step or self.writer is None:
                    return  # the step it belongs to is closed
                self.writer.add(
                    f"{name}_grad.{count}.debug", self.encoder.encode(gradient, f"{name}_grad.{count}.tensor")
                )
                self.writer.flush()

            self.register_grad(variable, on_grad)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
