"""Stack capture: one text per call site, cached, with the line each frame was at."""

import json

from msprobe.core.dump.stack import StackCapture


def capture_twice(capture):
    first = capture(1)
    second = capture(1)
    return first, second


def test_each_call_site_gets_its_own_line_and_a_repeated_site_reuses_its_text():
    capture = StackCapture()
    first, second = capture_twice(capture)
    first_lines, second_lines = json.loads(first)[0], json.loads(second)[0]
    assert "in capture_twice" in first_lines and "first = capture(1)" in first_lines
    assert "second = capture(1)" in second_lines and first_lines != second_lines
    again = [capture_twice(capture)[0] for _ in range(3)]
    assert all(text is again[0] for text in again)  # same site, same cached text
    assert json.loads(again[0])[0] == first_lines


def test_frames_under_a_tool_root_are_left_out():
    capture = StackCapture(__file__)
    assert "capture_twice" not in capture_twice(capture)[0]


def test_a_generator_resumed_from_different_callers_gets_each_callers_stack():
    capture = StackCapture()

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


def test_forget_lets_go_of_the_frames_kept():
    capture = StackCapture()
    capture_twice(capture)
    assert capture._chain and capture._place
    capture.forget()
    assert not capture._chain and not capture._place


def _innermost(capture):
    return capture(1)


def _two_calls_in_one_frame(capture):
    first = _innermost(capture)  # the caller at one line...
    second = _innermost(capture)  # ...then at the next: what lies above the callee changed
    return first, second


def _from_elsewhere(capture):
    return _innermost(capture)


def test_a_caller_that_moved_on_gives_the_callee_another_stack():
    capture = StackCapture()
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


def test_each_depth_of_a_recursion_has_its_own_stack():
    capture = StackCapture()
    texts, again = [_recurse(capture, 30) for _ in range(2)]
    assert [len(json.loads(text)) for text in texts] == [len(json.loads(texts[0])) + depth for depth in range(31)]
    assert again == texts  # every level from the cache, the chain walked from where it was left
    # the kept chain is the stack of the last capture, no deeper
    assert len(capture._chain) <= len(json.loads(texts[-1])) + 5
