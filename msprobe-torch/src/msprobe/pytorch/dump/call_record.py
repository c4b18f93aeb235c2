"""One recorded call's record, kept alive by the backward hooks it puts on the call's autograd graph until its
gradients arrive; the recorder writes its backward entry from it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from msprobe.pytorch.dump import grad_taps

if TYPE_CHECKING:
    from msprobe.pytorch.dump.recorder import TorchDumpRecorder


class CallRecord:
    """One recorded call, kept alive by its backward hooks until its gradients arrive."""

    __slots__ = (
        "args",
        "backward_name",
        "enclosing",
        "first_node",
        "first_watch",
        "grad_inputs",
        "handed_back",
        "in_place",
        "input_anchors",
        "input_grads",
        "input_slots",
        "inputs",
        "inputs_pending",
        "keep_backward",
        "keep_forward",
        "kwargs",
        "name",
        "nodes_before",
        "output_count",
        "output_grads",
        "parent",
        "recorder",
        "silent_slots",
        "wrote",
    )

    def __init__(self, name: str, backward_name: str, args: tuple, kwargs: dict, parent: str | None):
        self.name = name
        self.backward_name = backward_name
        self.args = args
        self.kwargs = kwargs
        self.parent = parent
        self.enclosing: tuple[str, ...] | None = None  # modules only: the calls around this one
        self.inputs: dict[str, Any] = {}
        self.grad_inputs: list[torch.Tensor] = []
        self.nodes_before: tuple | None = None
        self.input_anchors: list | None = None
        self.handed_back: dict[int, int] | None = None
        self.output_grads: dict[int, torch.Tensor] = {}
        self.input_grads: dict[int, torch.Tensor] = {}
        self.input_slots = 0
        self.silent_slots: dict[int, tuple] | None = None
        self.inputs_pending = 0
        self.first_node = 0
        self.first_watch = 0
        self.output_count = 0
        self.keep_forward = False
        self.keep_backward = False
        self.recorder: TorchDumpRecorder | None = None
        self.wrote = False
        self.in_place = False  # the call writes into its inputs: after it, they hold other values

    def watch_node(self, output: Any) -> None:
        """APIs: hook the node that made the output, or the output itself when the call handed an input back
        (see grad_taps.output_node)."""
        before = self.nodes_before
        if before is None:  # the call wrote nothing in place: the inputs' nodes are those they had before it
            before = grad_taps.nodes_of(self.grad_inputs)
        node, handed_back = grad_taps.output_node(output, before)
        if node is not None:
            screen = self.recorder.backward_screen if self.recorder is not None else None
            node.register_hook(self._node_hook if screen is None else screen(self._node_hook))
        elif handed_back is not None:
            grad_taps.on_gradient(handed_back, self._handed_back_hook)
        self.args, self.kwargs, self.grad_inputs, self.nodes_before = (), {}, [], None

    def watch_outputs(self, tensors: list[torch.Tensor | None]) -> None:
        """Modules: the gradient arriving at each output tensor (``grad_taps.output_tensors`` of the output)."""
        self.output_count = len(tensors)
        watched = [(index, t) for index, t in enumerate(tensors) if t is not None and t.requires_grad]
        for index, tensor in watched:
            grad_taps.on_gradient(tensor, self._output_hook(index, len(watched)))
        self.args, self.kwargs = (), {}

    def watch_tap(self, node: Any, indices: list[int], count: int) -> None:
        """Modules whose outputs went through a tap node (grad_taps.tap_outputs): the node's gradients are the
        outputs' gradients from outside, None for an output nobody used, all arriving at once."""
        self.output_count = count

        def hook(grad_inputs: tuple, grad_outputs: tuple) -> None:
            if self.recorder is not None:  # its backward starts: it takes its number now
                self.recorder.collector.backward_numbering.open(self.name)
            self.output_grads = {indices[j]: g for j, g in enumerate(grad_outputs) if g is not None}
            if self.inputs_pending == 0:
                self.on_input_grads(self._module_input_grads())

        node.register_hook(hook)
        self.args, self.kwargs = (), {}

    def watch_inputs(self, args: tuple, outputs: list[torch.Tensor | None]) -> None:
        """Modules: one slot per positional argument (null where no gradient flows, and for a value that is no
        tensor), as the reference writes: torch's full backward hooks report one gradient per argument.

        A slot holds what the module's own use of that input sends back, not
        the input's whole gradient (a residual connection adds its own): the
        autograd nodes of this call that consume an input are hooked (see
        grad_taps.input_uses). Written when all of them have run; a module
        that uses no input needing a gradient is written when its output
        gradients arrive.
        """
        slots = list(args)
        self.input_slots = len(slots)
        before = self.input_anchors if self.input_anchors is not None else grad_taps.anchors(slots)
        # an input handed back as an output unchanged (nn.Dropout with p=0, nn.Identity; not an in-place module,
        # which gives it a new node): its gradient passes straight through
        self.handed_back = {
            out: slot
            for slot, t in enumerate(slots)
            for out, o in enumerate(outputs)
            if o is t and isinstance(o, torch.Tensor) and o.grad_fn is before[slot][1]
        }
        uses = grad_taps.input_uses(slots, outputs, self.first_node, before)
        # torch's full backward hooks hand every positional tensor a gradient once one of them needs it: zeros
        # where none flows (a mask, an unused input)
        if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in slots):
            self.silent_slots = {
                i: (t.shape, t.dtype, t.device) for i, t in enumerate(slots) if isinstance(t, torch.Tensor)
            }
        self.input_anchors = None
        self.inputs_pending = len(uses)
        for node, edges in uses:
            node.register_hook(self._use_hook(edges))
        self.grad_inputs = []

    def _use_hook(self, edges: list[tuple[int, int]]) -> Callable:
        def hook(grad_inputs: tuple, grad_outputs: tuple) -> None:
            for edge, slot in edges:
                grad = grad_inputs[edge]
                if grad is not None:
                    earlier = self.input_grads.get(slot)
                    self.input_grads[slot] = grad if earlier is None else grad_taps.add(earlier, grad)
            self.inputs_pending -= 1
            if self.inputs_pending == 0:
                self.on_input_grads(self._module_input_grads())

        return hook

    def _output_hook(self, index: int, expected: int) -> Callable:
        def hook(grad: torch.Tensor) -> tuple[Callable[[], None], int] | None:
            if not self.output_grads and self.recorder is not None:  # its backward starts: it takes its number now
                self.recorder.collector.backward_numbering.open(self.name)
            self.output_grads[index] = grad
            slot = self.handed_back.get(index) if self.handed_back else None
            if slot is not None:
                earlier = self.input_grads.get(slot)
                self.input_grads[slot] = grad if earlier is None else grad_taps.add(earlier, grad)
            if self.inputs_pending == 0 and len(self.output_grads) == expected:
                if slot is not None:  # written after the calls inside it that handed the same tensor back
                    return (lambda: self.on_input_grads(self._module_input_grads())), self.first_watch
                self.on_input_grads(self._module_input_grads())
            return None

        return hook

    def _module_input_grads(self) -> tuple:
        grads = [self.input_grads.get(i) for i in range(self.input_slots)]
        if self.silent_slots:
            for slot, (shape, dtype, device) in self.silent_slots.items():
                if grads[slot] is None:
                    grads[slot] = grad_taps.zeros(shape, dtype, device)
        return tuple(grads)

    def _handed_back_hook(self, grad: torch.Tensor) -> None:
        """An input handed back unchanged: the gradient arriving at it goes in and comes out as it is."""
        self.output_count = 1
        self.output_grads = {0: grad}
        self.on_input_grads((grad,))

    def _node_hook(self, grad_inputs: tuple, grad_outputs: tuple) -> None:
        self.output_count = len(grad_outputs)
        self.output_grads = dict(enumerate(grad_outputs))
        self.on_input_grads(tuple(grad_inputs))

    def on_input_grads(self, grads: tuple) -> None:
        try:
            if self.wrote or self.recorder is None or not self.keep_backward:
                return
            self.wrote = True
            self.recorder.write_backward(self, grads)
        finally:
            # the hook, and so this record, lives as long as the graph (often until the next step's
            # forward replaces the loss): holding the gradients that long would keep megabytes alive
            self.output_grads, self.input_grads = {}, {}
