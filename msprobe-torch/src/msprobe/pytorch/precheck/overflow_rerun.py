"""run_overflow_check: is an overflow the device's doing, or would any device overflow?

Each overflowing forward API of an overflow dump is run again on the CPU in
the same dtype with the dumped inputs: if the CPU overflows too the overflow
is normal (the values are simply too large for the dtype); if not, it is
abnormal and worth a closer look at the device's kernel.
"""

from __future__ import annotations

import torch

from msprobe.core.dump.overflow import has_nonfinite
from msprobe.core.dump.reader import Dump
from msprobe.pytorch.precheck.run_ut import InputBuilder, Unsupported, prepare_inputs, resolve
from msprobe.pytorch.tensor_io import tensors_in


def rerun_overflows(dump: Dump) -> list[tuple[str, str]]:
    """A verdict for each forward API whose dumped output holds inf or nan; none when nothing overflowed."""
    verdicts = []
    for name, entry in dump.data.items():
        if not name.endswith(".forward") or name.startswith("Module."):
            continue
        if not has_nonfinite(entry.get("output")):  # a statistics or tensor dump holds every API, most fine
            continue
        try:
            builder = InputBuilder(dump, name)
            args = prepare_inputs(builder.value(entry.get("input_args", [])), "cpu", bench=False)
            kwargs = prepare_inputs(builder.value(entry.get("input_kwargs", {})), "cpu", bench=False)
            with torch.no_grad():
                outputs = tensors_in(resolve(name)(*args, **kwargs))
        except Unsupported as exc:
            verdicts.append((name, f"not checked ({exc})"))
            continue
        except Exception as exc:
            verdicts.append((name, f"not checked (the call failed: {type(exc).__name__}: {exc})"))
            continue
        overflowed = any(t.is_floating_point() and not torch.isfinite(t).all() for t in outputs)
        verdicts.append((name, "a normal overflow" if overflowed else "an abnormal overflow"))
    return verdicts
