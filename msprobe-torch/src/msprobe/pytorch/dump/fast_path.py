"""The per-call path in C (``_fast_path.c``): when it is used, and what it is connected to.

The bookkeeping of each recorded API call costs more in Python than many
calls themselves; the C fast path builds the same entry for a fraction of it. It covers the dumps whose
entries it can build exactly as the recorder does: levels L0, L1 and mix, tasks
statistics, tensor, structure, overflow_check and flight_recorder, with no
``list``, ``scope`` or filter of the forward side in ``data_mode``, no async
dump, no online pre-check (and for the overflow check, no NPU hardware
flag). The overflow check screens each call there and hands the recorder
only a call whose output holds inf or nan, which it decides on and writes
(in backward, the hook it puts on each call's node screens the leaving
gradients and makes the recorder's record only for inf or nan);
the flight recorder's entries are all written there, except one whose
outputs show inf or nan, which goes with its text to the collector's
``flight_handoff`` (the first such call is the recorder's trigger).
Within those it encodes the usual values itself and asks the Python encoder
for the rest, one value at a time; a call's backward record is the
recorder's (``watch_backward``), and a call made while backward runs goes
to the recorder whole.

With device statistics read back in batches (``device_batch``; CUDA, NPU,
or ``MSPROBE_FORCE_DEVICE_PATH=1``) an entry is written while its tensors'
statistics are still on the device: each such value is a token in its
text (msprobe.core.dump.pending_values) and the entry waits in the writer
(``DumpWriter.add_waiting``) until the batch is read back. A plain
tensor's statistics summary is written here (``waiting_summaries``: its
text cached as the quick texts are, one token for the statistics); other
values come through ``waiting_json``. The
overflow check and the flight recorder decide on values as a call ends, so
with a device batch they stay on the Python path.

The extension is optional: without a C compiler at install time (or with
``MSPROBE_NO_FAST_PATH=1``) every call goes the Python way.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson
import torch

from msprobe.core.dump import float_stats
from msprobe.core.dump.pending_values import PLACEHOLDERS
from msprobe.core.dump.writer import NO_PARENT, encode_json, journal_c_api
from msprobe.core.switches import built_extension, switched_off
from msprobe.pytorch.dump import device_batch, grad_taps

try:
    from msprobe.pytorch.dump import _fast_path
except ImportError:  # built without a C compiler
    _fast_path = None

logger = logging.getLogger(__name__)

# The _fast_path.c this module is written for: it reads and writes the recorder's state by attribute name
# (_fast_path.INTERFACE lists them by owner), so both sides change together and bump this number.
INTERFACE_VERSION = 5

if switched_off("MSPROBE_NO_FAST_PATH"):
    _fast_path = None
else:
    _fast_path = built_extension(_fast_path, INTERFACE_VERSION, "msprobe.pytorch.dump._fast_path")

if TYPE_CHECKING:
    from msprobe.pytorch.dump.recorder import TorchDumpRecorder

AVAILABLE = _fast_path is not None  # tests turn it off to compare the two ways

# the tensor attributes the fast path reads per call; it reads them through torch's own descriptors
_READ_PER_CALL = (
    "_version",
    "dtype",
    "shape",
    "is_cpu",
    "requires_grad",
    "data_ptr",
    "is_contiguous",
    "is_neg",
    "stride",
    "untyped_storage",
)


def _descriptors() -> dict[str, Any]:
    """TensorBase's descriptor of each attribute, where torch.Tensor and Parameter use that very one (a class
    that overrides an attribute, or a torch that moved it, leaves it to be read by name)."""
    base = torch._C.TensorBase
    found = {}
    for name in _READ_PER_CALL:
        descriptor = base.__dict__.get(name)
        classes = (torch.Tensor, torch.nn.Parameter)
        if descriptor is not None and all(inspect.getattr_static(kind, name, None) is descriptor for kind in classes):
            found[name] = descriptor
    return found


if _fast_path is not None:
    _fast_path.configure(_descriptors(), orjson.dumps)  # orjson writes floats as the Python path does, and fast


def summaries(log: Any, checksum: Callable[[torch.Tensor], str] | None = None, sums: bool = False) -> Any:
    """The C cache of the usual tensors' summaries as JSON text (see ``_fast_path.c``), or None where it cannot run.
    ``checksum(tensor)``: summary_mode md5's CRC-32, cached with the statistics. ``sums``: a run of several
    processes, whose summaries carry the float64 sums that merge its ranks (see parallel.float64_sums)."""
    return _summaries(log, checksum=checksum, sums=sums)


def waiting_summaries(
    log: Any,
    measure: Callable[[torch.Tensor], Any],
    rest: Callable[[Any, bool], str],
) -> Any:
    """The C cache of device tensors' summaries whose statistics wait in the batch: the text up to the statistics
    cached as the quick texts are, ``measure(tensor)`` (its statistics into the batch, or None for the general
    way) on a miss, ``rest(stats, requires_grad)`` for the text from the statistics on. None where it cannot run."""
    return _summaries(log, measure=measure, rest=rest)


def _summaries(log: Any, **options: Any) -> Any:
    """A C Summaries cache over the write ``log``, or None where the fast path or the C kernels are missing."""
    if not (AVAILABLE and float_stats.AVAILABLE):
        return None
    return _fast_path.Summaries(
        log, torch.Tensor, torch.nn.Parameter, torch.float32, torch.float64, float_stats.c_api(), **options
    )


def eligible(recorder: TorchDumpRecorder) -> bool:
    """Whether every entry the fast path would write is the one the recorder writes for this run."""
    config = recorder.session.config
    collector = recorder.collector
    modes = collector.modes
    return (
        AVAILABLE
        and recorder.level in ("L0", "L1", "mix")
        and config.task in ("statistics", "tensor", "structure", "overflow_check", "nan_check", "flight_recorder")
        # the overflow check screens in C with the kernels; the NPU's hardware flag is read the Python way
        and (collector.overflow is None or (float_stats.AVAILABLE and collector.hardware_flag is None))
        and not collector.deferred
        and recorder.sender is None
        and not config.live_diff  # each call's checksums are compared with the bench's in Python
        and config.summary_plan.checksum != "xor"  # the fast path writes statistics, not xor checksums
        # device statistics wait in a batch, and the entries holding them in the writer (see waiting_json); the
        # overflow check and the flight recorder decide on values, which must be there when the call ends
        and (recorder.summarizer.batch is None or (collector.overflow is None and collector.flight is None))
        and recorder.summarizer.cut is None  # request_id and slice: the part is taken in Python
        and not collector.names.active
        and not config.scope
        and modes.forward
        and modes.inputs
        and modes.outputs
    )


def interface_problems(owners: dict[str, Any]) -> list[str]:
    """The attributes ``_fast_path.INTERFACE`` reads that ``owners`` (by the interface's owner names) lack."""
    problems = []
    for owner, names in _fast_path.INTERFACE.items():
        target = owners.get(owner)
        if target is not None:
            problems += [f"{owner} ({type(target).__name__}).{name}" for name in names if not hasattr(target, name)]
    return problems


_told_interface = False


def make_fast_path(
    recorder: TorchDumpRecorder,
    classify: Callable[[str], bool],
    overwritten: Callable[[str, tuple, dict], list],
    graph_task_id: Callable[[], int],
) -> Any:
    """The C handler for ``recorder``'s API wrappers, falling back to its Python handler where it must; None when
    the fast path cannot write this run's entries."""
    if not eligible(recorder):
        return None
    summarizer, collector = recorder.summarizer, recorder.collector
    owners = {
        "state": recorder.state,
        "log": summarizer.write_log if summarizer.caches else None,
        "overflow": collector.overflow,
        "collector": collector,
        "writer": collector.writer,
    }
    missing = interface_problems(owners)
    if missing:
        global _told_interface
        if not _told_interface:
            _told_interface = True
            logger.warning("msprobe: the per-call path in C is off: it reads %s, which no longer exist", missing)
        return None
    encoder = collector.encoder
    # with a device batch, a value still on the device is a token in the entry's text, filled in at read-back
    to_text = device_batch.waiting_json if summarizer.batch is not None else encode_json
    screening = {}
    if collector.overflow is not None:
        from msprobe.pytorch.dump.measuring import SCREEN_KINDS

        screening = {
            "overflow": collector.overflow,
            "overflowed": recorder.forward_overflowed,
            "nonfinite": summarizer.nonfinite,
            "screen_kinds": SCREEN_KINDS,
            "kernels": float_stats.c_api(),
        }
    return _fast_path.FastPath(
        summaries=summarizer.quick_texts,
        with_values=recorder.session.config.task != "structure",
        log=summarizer.write_log if summarizer.caches else None,
        tensor_type=torch.Tensor,
        slow=recorder.call_api,
        state=recorder.state,
        counts=recorder.api_counts,
        classify=classify,
        grad_enabled=torch.is_grad_enabled,
        graph_task_id=graph_task_id,
        module_stack=recorder.module_stack if recorder.with_construct else None,
        no_parent=NO_PARENT,
        stack=recorder.stack,
        collector=collector,
        encode_value=lambda value, suffix: to_text(encoder.encode(value, suffix)),
        encode_outputs=lambda output, prefix: to_text(encoder.encode_outputs(output, prefix)),
        overwritten=overwritten,
        report=collector.report_failure,
        watch=recorder.watch_backward,
        nodes_of=grad_taps.nodes_of,
        backward=collector.modes.backward,
        parameter_type=torch.nn.Parameter,
        handoff=collector.flight_handoff if collector.flight is not None else None,
        late_backward=recorder.late_backward_hook if collector.overflow is not None else None,
        lock=recorder.lock,
        journal=journal_c_api(),
        waiting=summarizer.waiting_texts,
        drop=PLACEHOLDERS.drop if summarizer.batch is not None else None,
        **screening,
    )
