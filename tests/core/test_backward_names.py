from msprobe.core.dump.backward_names import BackwardNumbering, forward_index_name


def test_module_calls_are_numbered_in_the_order_their_backward_starts():
    numbering = BackwardNumbering()
    assert numbering.start("Module.block.Block.forward.1") == "Module.block.Block.backward.0"
    assert numbering.start("Module.fc.Linear.forward.0") == "Module.fc.Linear.backward.0"  # numbers are per module
    assert numbering.start("Cell.block.Block.forward.0") == "Cell.block.Block.backward.0"
    assert numbering.start("Module.block.Block.forward.0") == "Module.block.Block.backward.1"
    assert numbering.start("Module.block.Block.forward.1") == "Module.block.Block.backward.0"  # asked again: same


def test_parents_are_backward_names_and_fall_back_to_the_forward_number():
    numbering = BackwardNumbering()
    numbering.start("Module.block.Block.forward.1")
    assert numbering.parent("Module.block.Block.forward.1") == "Module.block.Block.backward.0"
    assert numbering.parent("Module.block.Block.forward.0") == "Module.block.Block.backward.0"  # not started
    assert numbering.parent(None) is None
    numbering.reset()
    assert numbering.start("Module.block.Block.forward.0") == "Module.block.Block.backward.0"


def test_api_backward_names_keep_the_forward_number():
    assert forward_index_name("Functional.relu.3.forward") == "Functional.relu.3.backward"
    assert forward_index_name("Tensor.__add__.0.forward") == "Tensor.__add__.0.backward"
