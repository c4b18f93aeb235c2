"""How values that are not tensors are written: the reference's rules (its data processor's transform)."""

from collections import OrderedDict, namedtuple
from dataclasses import dataclass

from msprobe.core.dump.values import ValueEncoder


class Tensor:  # a stand-in: the encoder asks the framework to summarize tensors
    pass


def encoder() -> ValueEncoder:
    return ValueEncoder(Tensor, lambda tensor, suffix: {"type": "tensor", "suffix": suffix}, lambda value: None)


@dataclass
class Output(OrderedDict):  # the shape of a HuggingFace ModelOutput: a dataclass and a dict of its set fields
    last_hidden_state: object = None
    hidden_states: object = None
    attentions: object = None


def test_a_dataclass_lists_every_field_set_or_not():
    output = Output(last_hidden_state=Tensor())
    assert encoder().encode(output, "output.0") == {
        "last_hidden_state": {"type": "tensor", "suffix": "output.0.last_hidden_state"},
        "hidden_states": None,
        "attentions": None,
    }


def test_a_namedtuple_is_written_by_field_name():
    Pair = namedtuple("Pair", ["values", "count"])
    assert encoder().encode(Pair(Tensor(), 3), "output.0") == {
        "values": {"type": "tensor", "suffix": "output.0.values"},
        "count": {"type": "int", "value": 3},
    }


def test_an_object_nobody_knows_is_null():
    assert encoder().encode(object(), "input.cache") is None
    assert encoder().encode_args((object(),), {"cache": object()}, "X") == ([None], {"cache": None})
