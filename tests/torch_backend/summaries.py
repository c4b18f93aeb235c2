"""Reading a tensor summary in tests, whichever form the summarizer gave it."""

from msprobe.core.dump.writer import RawJSON


def summary_of(summarizer, tensor, stem: str = "x") -> dict:
    """A dict, whether the summarizer returned one or the usual tensors' JSON text (RawJSON, from the C path)."""
    value = summarizer(tensor, stem)
    return value.value() if isinstance(value, RawJSON) else value
