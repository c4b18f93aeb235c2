"""The serving cut's rules (request_id, slice), against layouts worked out by hand and numpy's own slicing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from msprobe.core.config import validate_config_dict
from msprobe.core.errors import ConfigError, UsageError
from msprobe.core.recording.tensor_cuts import KvCacheTensors, TensorCut, find_request, reaches_kv_cache, tensor_cut


def test_rows_of_a_flat_token_dimension_and_of_one_row_per_request():
    rows = find_request("c", ["a", "b", "c", "d"], [3, 2, 4, 1])  # tokens 0-2 a, 3-4 b, 5-8 c, 9 d
    assert rows.rows(10) == (5, 9)  # the engine's flat token dimension
    assert rows.rows(4) == (2, 3)  # one row per request (last-token logits)
    assert rows.rows(7) is None  # counts neither: kept whole
    padded = find_request(1, [0, 1, 2], [6, 6, 6])  # a padded batch of 3 prompts of 6, flattened by a view
    assert (padded.rows(18), padded.rows(3)) == ((6, 12), (1, 2))
    assert find_request("x", ["a", "b"], [1, 1]) is None  # not in this forward
    assert find_request("7", [7, 8], None).rows(2) == (0, 1)  # ids match by text; one token each by default


@pytest.mark.parametrize(
    "ids,tokens,message",
    [
        (["a", "b"], [1], "1 counts for 2 request_ids"),
        (["a", "b"], [1, -1], "non-negative integers"),
        (["a", "b"], [1, 1.5], "non-negative integers"),
        (["a", "a"], [1, 1], "same id twice"),
    ],
)
def test_a_bad_batch_description_is_one_clear_error(ids, tokens, message):
    with pytest.raises(UsageError, match=message):
        find_request("a", ids, tokens)


def test_the_index_cuts_rows_then_slices_like_numpy():
    values = np.arange(10 * 6 * 4).reshape(10, 6, 4)
    cut = TensorCut("c", [(1, None, 2), (None, 3, None)])
    cut.rows = find_request("c", ["a", "b", "c", "d"], [3, 2, 4, 1])
    index = cut.index(values.shape)
    # request c's rows 5..8, then every second of them from its second, then the first 3 of dimension 1
    np.testing.assert_array_equal(values[index], values[5:9][1::2, :3])
    assert cut.index(values.shape, is_parameter=True) is None  # a parameter is never cut
    assert cut.index(()) is None  # nor a scalar
    other = np.arange(7 * 5).reshape(7, 5)  # first dimension counts neither: only the slice
    np.testing.assert_array_equal(other[cut.index(other.shape)], other[1::2, :3])
    cut.slices = [slice(10, 20)]  # past the request's rows: nothing, not another request's rows
    assert values[cut.index(values.shape)].shape == (0, 6, 4)


def test_slice_alone_keeps_part_of_each_dimension_it_names():
    cut = TensorCut(None, [(None, 1024, None)])
    values = np.zeros((2000, 3))
    assert values[cut.index(values.shape)].shape == (1024, 3)
    assert np.zeros(5)[cut.index((5,))].shape == (5,)


def test_kv_cache_places_are_recognised_by_name():
    assert reaches_kv_cache("Module.attn.Attention.forward.0.kwargs.past_key_values.0.1")
    assert reaches_kv_cache("Module.attn.Attention.forward.0.output.0.layer_past")
    assert not reaches_kv_cache("Torch.cat.0.forward.input.0.0")
    assert not reaches_kv_cache("Module.kv_cache_size.Linear.forward.0.input.0")  # a name that only contains one


def _config(**section):
    return validate_config_dict({"task": "statistics", "dump_path": "/tmp/x", "statistics": section})


def test_config_reads_26x_slice_and_request_id():
    config = _config(slice=[{"end": 1024}, {"start": 2, "step": 3}], request_id="req-7")
    cut = tensor_cut(config)
    assert cut.request_id == "req-7" and cut.slices == [slice(None, 1024, None), slice(2, None, 3)]
    assert tensor_cut(_config()) is None  # nothing configured: every tensor whole
    assert json.loads(config.model_dump_json(by_alias=True))["statistics"]["slice"][0]["end"] == 1024


@pytest.mark.parametrize("section", [{"slice": [{"step": 0}]}, {"slice": [{"stop": 3}]}, {"slice": {"end": 3}}])
def test_a_bad_slice_names_the_field(section):
    with pytest.raises(ConfigError, match="statistics.slice"):
        _config(**section)


class _Tensor:
    """Stands in for a framework tensor: the set only needs identity and weak references."""


def test_what_a_concatenation_grows_from_a_known_cache_is_a_cache():
    cache = KvCacheTensors()
    old, new_key, grown, query = _Tensor(), _Tensor(), _Tensor(), _Tensor()
    cache.add([old])
    assert cache.holds(old, "Torch.cat.0.forward.input.0.0")
    assert not cache.holds(new_key, "Torch.cat.0.forward.input.0.1")  # the step's own key: saved
    assert cache.holds(grown, "Torch.cat.0.forward.output.0")  # the cache after the step
    assert not cache.holds(query, "Functional.sdpa.0.forward.input.0")
    assert cache.holds(grown, "Functional.sdpa.0.forward.input.1")  # remembered where it is read
    assert not cache.holds(_Tensor(), "Functional.sdpa.0.forward.output.0")  # reading a cache makes none
    assert not cache.holds(_Tensor(), "Torch.cat.0.forward.output.0")  # the growing call is over
    unrelated = _Tensor()
    assert not cache.holds(unrelated, "Torch.cat.1.forward.input.0.0")
    assert not cache.holds(_Tensor(), "Torch.cat.1.forward.output.0")  # a cat of other tensors is no cache
    assert cache.holds(_Tensor(), "Module.attn.Attention.forward.0.kwargs.layer_past.0")  # by name


def test_the_cache_set_keeps_nothing_alive():
    import gc
    import weakref

    cache, held = KvCacheTensors(), _Tensor()
    watch = weakref.ref(held)
    cache.add([held])
    del held
    gc.collect()
    assert watch() is None
