"""Stack capture: one text per call site, cached, with the line each frame was at."""

import json

import pytest

from msprobe.core.dump import stack
from msprobe.core.dump.stack import StackCapture

WALKS = ["python", pytest.param("c", marks=pytest.mark.skipif(stack._frames is None, reason="built without C"))]


@pytest.fixture(params=WALKS)
def make_capture(request):
    """StackCapture itself, or the C walker over one: every test here holds for both."""
    if request.param == "python":
        return StackCapture
    return lambda *roots: stack._frames.Walker(StackCapture(*roots))


def state(capture):
    return getattr(capture, "capture", capture)


def capture_twice(capture):
    first = capture(1)
    second = capture(1)
    return first, second


def test_each_call_site_gets_its_own_line_and_a_repeated_site_reuses_its_text(make_capture):
    capture = make_capture()
    first, second = capture_twice(capture)
    first_lines, second_lines = json.loads(first)[0], json.loads(second)[0]
    assert "in capture_twice" in first_lines and "first = capture(1)" in first_lines
    assert "second = capture(1)" in second_lines and first_lines != second_lines
    again = [capture_twice(capture)[0] for _ in range(3)]
    assert all(text is again[0] for text in again)  # same site, same cached text
    assert json.loads(again[0])[0] == first_lines


def test_frames_under_a_tool_root_are_left_out(make_capture):
    capture = make_capture(__file__)
    assert "capture_twice" not in capture_twice(capture)[0]


def test_a_generator_resumed_from_different_callers_gets_each_callers_stack(make_capture):
    capture = make_capture()

    def frames():
        while True:
            yield capture(1)

    def first_caller(generator):
        return next(generator)

    def second_caller(generator):
        return next(generator)

    generator = frames()
    first, second = first_caller(generator), second_caller(generator)
    assert "in first_caller," in first and "in second_caller," not in first
    assert "in second_caller," in second and "in first_caller," not in second


def test_forget_lets_go_of_the_frames_kept(make_capture):
    capture = make_capture()
    capture_twice(capture)
    assert state(capture)._chain and state(capture)._place
    capture.forget()
    assert not state(capture)._chain and not state(capture)._place


def _innermost(capture):
    return capture(1)


def _two_calls_in_one_frame(capture):
    first = _innermost(capture)  # the caller at one line...
    second = _innermost(capture)  # ...then at the next: what lies above the callee changed
    return first, second


def _from_elsewhere(capture):
    return _innermost(capture)


def test_a_caller_that_moved_on_gives_the_callee_another_stack(make_capture):
    capture = make_capture()
    (first, second), again = [_two_calls_in_one_frame(capture) for _ in range(2)]
    assert again == (first, second)  # the same sites again: the same texts
    assert "first = _innermost(capture)" in first and "second = _innermost(capture)" not in first
    assert "second = _innermost(capture)" in second and "first = _innermost(capture)" not in second
    elsewhere = _from_elsewhere(capture)
    assert "in _from_elsewhere," in elsewhere and "_two_calls_in_one_frame" not in elsewhere


def _recurse(capture, depth):
    if depth == 0:
        return [capture(1)]
    return [capture(1), *_recurse(capture, depth - 1)]


def test_each_depth_of_a_recursion_has_its_own_stack(make_capture):
    capture = make_capture()
    texts, again = [_recurse(capture, 30) for _ in range(2)]
    assert [len(json.loads(text)) for text in texts] == [len(json.loads(texts[0])) + depth for depth in range(31)]
    assert again == texts  # every level from the cache, the chain walked from where it was left
    # the kept chain is the stack of the last capture, no deeper
    assert len(state(capture)._chain) <= len(json.loads(texts[-1])) + 5


def _site(capture):
    return capture(1)  # one call site for either walk: the same instruction


def _deeper(capture, walks):
    return [_site(walk) for walk in walks]


@pytest.mark.skipif(stack._frames is None, reason="built without C")
@pytest.mark.parametrize("first", ["python", "c"])
def test_the_two_walks_share_their_state_and_find_the_same_stack(first):
    capture = StackCapture()
    walker = stack._frames.Walker(capture)
    walks = [capture, walker] if first == "python" else [walker, capture]
    rounds, numbered = [], []
    for _ in range(2):
        rounds.append(_deeper(capture, walks) + [_site(walk) for walk in walks])
        numbered.append(dict(capture._numbers))
    texts = rounds[0]
    assert texts[0] is texts[1] and texts[2] is texts[3]  # one cached text per stack, whichever walked it
    assert "in _deeper," in texts[0] and "in _deeper," not in texts[2]
    assert rounds[1] == texts and numbered[1] == numbered[0]  # the same stacks again: nothing numbered anew
    walker.forget()
    assert not capture._chain and not capture._place


@pytest.mark.skipif(stack._frames is None, reason="built without C")
def test_the_walker_names_the_line_and_function_python_gives():
    import sys

    walker = stack._frames.Walker(StackCapture())
    text, frame = walker(), sys._getframe()
    expected = f"File {__file__}, line {frame.f_lineno - 1}, in {frame.f_code.co_name}, \n "
    assert json.loads(text)[0] == expected + "text, frame = walker(), sys._getframe()"
    assert walker(2) == json.dumps(json.loads(text)[1:])  # skip: from the caller's frame out
