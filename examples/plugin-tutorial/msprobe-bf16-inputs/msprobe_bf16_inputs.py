"""A free-benchmark perturbation: would this API give the same answer if its inputs were bfloat16?"""

from msprobe.core.backend import Perturbation
from msprobe.core.hookspecs import hookimpl


def round_to_bfloat16(tensor):
    """The tensor rounded to bfloat16 precision, in its own dtype: a new tensor, the input is left alone."""
    import torch  # imported when a run uses the perturbation, not when msprobe discovers the plugin

    return tensor.to(torch.bfloat16).to(tensor.dtype)


@hookimpl
def msprobe_free_benchmark_perturbations() -> list[Perturbation]:
    return [Perturbation("bf16_inputs", round_to_bfloat16, "pytorch", "round inputs to bfloat16 precision")]
