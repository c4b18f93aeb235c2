"""The NaN flight recorder (``task: "flight_recorder"``): the last steps' statistics, written only when needed.

Every step is recorded as a statistics dump would be, but into memory; the
last ``window`` steps are kept and nothing reaches the disk while all is
finite. A trigger writes them out as ordinary step folders (compare and
graph read them unchanged) and a report, ``flight_recorder_report.json``
in ``dump_path``:

- ``nonfinite``: the first inf or nan in any recorded tensor. The entry
  that holds it is the first API (or module) that produced one; its inputs
  are saved as tensor files when ``save_tensors`` is on;
- ``loss_spike``: a loss passed to ``debugger.step(loss=...)`` that breaks
  the training-state monitor's anomaly rule (AnomalyTurbulence);
- ``flush``: ``debugger.flush()``.

After a trigger the steps written so far are not written again, and the
step that triggered is written as it goes on (at its end in full), so a
training that dies right after its first NaN keeps what led there.
"""

from __future__ import annotations

import collections
import logging
import math
from pathlib import Path
from typing import Any

from msprobe.core.dump.writer import DumpWriter
from msprobe.core.files import make_dir, write_json_atomic
from msprobe.core.monitor.anomaly import turbulent

logger = logging.getLogger(__name__)

REPORT_NAME = "flight_recorder_report.json"


class BufferedWriter(DumpWriter):
    """A step's writer that keeps everything in memory until it is told to go to disk (``go_live``)."""

    def __init__(self, folder: Path, header: dict[str, Any], step: int, extra_info: bool = True):
        super().__init__(folder, header, journal=False, extra_info=extra_info, create=False)
        self.step = step
        self.live = False

    def go_live(self) -> None:
        """From now on this step is written as any dump's: its folder exists and flushes reach the disk."""
        if not self.live:
            self.live = True
            make_dir(self.folder)
            self._dirty = True
            DumpWriter.flush(self)

    def flush(self) -> None:
        if self.live:
            DumpWriter.flush(self)

    def close(self) -> None:
        if self.live:
            DumpWriter.close(self)
        else:
            self._closed = True  # kept in memory, in the window

    def size(self) -> int:
        """The characters its dump.json would hold (what the window costs in memory, roughly)."""
        return sum(len(name) + len(text) for name, text in self.data.items() if isinstance(text, str))


class LossRule:
    """The training-state monitor's AnomalyTurbulence (``turbulent``) on the loss, or a loss not finite. Two
    choices of a trigger, where the monitor reports every value: a spike is kept out of the mean, so the steps
    after it are measured against the losses before it, not flagged in turn; and consecutive anomalous losses
    are one event, only the first of them reported until a normal loss comes again."""

    def __init__(self, threshold: float):
        self.threshold = threshold
        self.mean = 0.0
        self.count = 0
        self.in_event = False

    def check(self, value: float) -> str | None:
        reason = self._anomaly(value)
        if reason is None:
            self.in_event = False
            self.mean = (self.mean * self.count + value) / (self.count + 1)
            self.count += 1
            return None
        first, self.in_event = not self.in_event, True
        return reason if first else None

    def _anomaly(self, value: float) -> str | None:
        if not math.isfinite(value):
            return f"loss is {value}"
        if turbulent(value, self.mean, self.count, self.threshold):
            return f"loss {value:.6g} is more than {self.threshold} away from its mean {self.mean:.6g}"
        return None


class FlightRecorder:
    """The window of past steps, the triggers and the report, for one run."""

    def __init__(self, session: Any):
        self.session = session
        section = session.config.flight_recorder
        # the step under way counts: a window of 5 keeps the 4 steps before it
        self.window: collections.deque[BufferedWriter] = collections.deque(maxlen=section.window - 1)
        self.triggers = set(section.triggers)
        self.save_tensors = section.save_tensors
        self.current: BufferedWriter | None = None
        self.first_nonfinite: dict[str, Any] | None = None
        self.triggered: list[dict[str, Any]] = []
        self.last_finite_step: int | None = None
        self._step_nonfinite = False
        self._loss = LossRule(section.loss_threshold) if "loss_spike" in self.triggers else None

    # -- the collector's side ----------------------------------------------------------
    def writer(self, folder: Path, header: dict[str, Any]) -> BufferedWriter:
        writer = BufferedWriter(folder, header, self.session.step, self.session.config.extra_info)
        self.current = writer
        return writer

    def wants_nonfinite(self) -> bool:
        return self.first_nonfinite is None and "nonfinite" in self.triggers

    def nonfinite(self, name: str, stack: Any, parent: Any) -> None:
        """The first entry holding an inf or nan: it names the API that produced it."""
        module = parent if isinstance(parent, str) else None
        self.first_nonfinite = {
            "api": name,
            "step": self.session.step,
            "rank": self.session.rank,
            "module": module,
            "stack": stack if isinstance(stack, list) else _frames(stack),
        }
        self._step_nonfinite = True
        logger.warning("msprobe flight recorder: first inf/nan in %s at step %d", name, self.session.step)
        self.trigger("nonfinite")

    def step_closed(self, writer: Any) -> None:
        if isinstance(writer, BufferedWriter) and not writer.live:
            self.window.append(writer)
        elif self._step_nonfinite:
            self._name_first_nonfinite(writer.folder)
        if not self._step_nonfinite and self.first_nonfinite is None:
            self.last_finite_step = self.session.step
        self._step_nonfinite = False
        self.current = None

    # -- the user's side ------------------------------------------------------------------
    def observe_loss(self, loss: float) -> None:
        if self._loss is None:
            return
        reason = self._loss.check(float(loss))
        if reason is not None:
            logger.warning("msprobe flight recorder: loss spike at step %d (%s)", self.session.step, reason)
            self.trigger("loss_spike", reason)

    def flush(self) -> None:
        if "flush" in self.triggers:
            self.trigger("flush")

    # -- writing out -------------------------------------------------------------------------
    def trigger(self, kind: str, reason: str | None = None) -> None:
        """Write the window's steps and the step under way, and the report."""
        steps, lost = [], []
        writers = [*self.window, *([self.current] if self.current is not None else [])]
        self.window.clear()
        for writer in writers:
            try:
                writer.go_live()
                steps.append(writer.step)
            except OSError as exc:  # a full disk: the other steps and the report are still tried
                lost.append(writer.step)
                logger.warning("msprobe flight recorder: step %d could not be written to %s: %s", writer.step,
                               writer.folder, exc.strerror or exc)  # fmt: skip
        record = {"trigger": kind, "step": self.session.step, "steps_written": steps}
        if lost:
            record["steps_lost"] = lost
        if reason:
            record["reason"] = reason
        self.triggered.append(record)
        self._write_report()

    def _write_report(self) -> None:
        report = {
            "first_nonfinite": self.first_nonfinite,
            "last_finite_step": self.last_finite_step,
            "triggers": self.triggered,
        }
        path = Path(self.session.config.dump_path) / REPORT_NAME
        try:
            write_json_atomic(path, report, indent=2)
        except Exception as exc:  # the training goes on; the steps are written all the same
            logger.warning("msprobe flight recorder: the report of step %d could not be written to %s: %s",
                           self.session.step, path, exc)  # fmt: skip

    def _name_first_nonfinite(self, folder: Path) -> None:
        """The step that made the first inf or nan is written: the report names the call by the diagnosis's
        rule (msprobe.core.diagnosis.first_nonfinite), the one ``db trend`` answers by too."""
        from msprobe.core.diagnosis import first_nonfinite
        from msprobe.core.dump.reader import read_dump

        try:
            dump = read_dump(folder)
            call = first_nonfinite(dump)
        except Exception as exc:  # the live finding stays in the report
            logger.warning("msprobe flight recorder: step %d could not be read back: %s", self.session.step, exc)
            return
        if call is None or self.first_nonfinite is None:
            return
        self.first_nonfinite.update(api=call.name, module=call.module, stack=dump.stack.get(call.name) or [])
        self._write_report()

    def memory(self) -> int:
        return sum(writer.size() for writer in self.window)


def _frames(stack: Any) -> list[str]:
    """stack.json's frames from the encoded text the stack capture hands the writer."""
    import json

    text = str(stack) if stack is not None else "[]"
    try:
        frames = json.loads(text)
    except ValueError:
        return []
    return frames if isinstance(frames, list) else []
