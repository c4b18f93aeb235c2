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


def test_forget_lets_go_of_the_last_frame():
    capture = StackCapture()
    capture_twice(capture)
    assert capture._last is not None
    capture.forget()
    assert capture._last is None
