"""Generated responses as msprobe reads them: JSON lines, one response each, checked field by field."""

from __future__ import annotations

import json
import math
import re
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MOST_BYTES = 1 << 30  # a responses file larger than this is refused rather than read


@dataclass(frozen=True)
class Response:
    name: str
    tokens: Sequence[int]  # as read from a file: compact arrays (8 bytes a value), not a Python object each
    logprobs: Sequence[float]
    entropies: Sequence[float] | None = None
    top_logprobs: list[dict[int, float]] | None = None  # each position's candidates: token -> log-probability
    key: tuple = ()  # what pairs it with the other side's response: the id with its JSON type (1 is not "1")

    @property
    def pairing_key(self) -> tuple:
        return self.key or ("name", self.name)


def read_responses(path: Path) -> list[Response]:
    """The responses of a JSON-lines file, one object per line: ``tokens`` (ints), ``logprobs`` (floats; null,
    NaN and -Infinity allowed), optional ``entropies``, ``top_logprobs`` (per position, ``{"token": logprob}``
    or ``[[token, logprob], ...]``) and ``id``. Bad input is one DataFileError naming the line and the field."""
    from pydantic import BaseModel, ConfigDict, StrictFloat, StrictInt, StrictStr, ValidationError

    from msprobe.core.config import config_error_from_validation
    from msprobe.core.dump.surrogates import lone_surrogate_message
    from msprobe.core.errors import DataFileError

    # strict: a token "12" or true, a log-probability "-0.5", is not a number a model gave (an integer log
    # probability, 0, is)
    Number = StrictFloat | StrictInt

    class Record(BaseModel):  # the per-token columns are read by _column, into arrays
        model_config = ConfigDict(extra="ignore")
        id: StrictStr | StrictInt | None = None
        top_logprobs: list[dict[int, Number] | list[tuple[StrictInt, Number]]] | None = None

    if not path.is_file():
        raise DataFileError(path, "is not a file")
    if path.stat().st_size > MOST_BYTES:
        raise DataFileError(path, f"is larger than {MOST_BYTES >> 20} MB")
    responses = []
    seen: dict[tuple, int] = {}
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataFileError(path, f"line {number} is not UTF-8 text (byte {exc.start + 1})") from None
            if not line.strip():
                continue
            lone = lone_surrogate_message(raw)
            if lone is not None:  # a name holding half a UTF-16 pair cannot be printed, nor written as UTF-8
                raise DataFileError(path, f"line {number}: {lone}")
            del raw  # the text alone while it is parsed: a line may be hundreds of megabytes
            try:
                fields = _parse_line(line, path, number)
                del line
                tokens = _column(path, number, "tokens", fields.pop("tokens", None), integers=True)
                logprobs = _column(path, number, "logprobs", fields.pop("logprobs", None), integers=False)
                entropies = _column(path, number, "entropies", fields.pop("entropies", None), integers=False)
                record = Record.model_validate(fields)
            except json.JSONDecodeError as exc:
                raise DataFileError(path, f"line {number} is not JSON ({exc.msg})") from None
            except RecursionError:
                raise DataFileError(path, f"line {number} is JSON nested too deeply") from None
            except ValidationError as exc:
                problem = config_error_from_validation(exc, None)
                raise DataFileError(path, f"line {number}: {problem}") from None
            except ValueError as exc:  # an integer of thousands of digits, which Python refuses to convert
                words = "holds an integer too long to read" if "digits" in str(exc) else str(exc)
                raise DataFileError(path, f"line {number}: {words}") from None
            for field_name, values in (
                ("logprobs", logprobs),
                ("entropies", entropies),
                ("top_logprobs", record.top_logprobs),
            ):
                if values is not None and len(values) != len(tokens):
                    raise DataFileError(path, f"line {number}: field {field_name!r} has {len(values)} values for "
                                              f"{len(tokens)} tokens")  # fmt: skip
            tops = None if record.top_logprobs is None else [dict(top) for top in record.top_logprobs]
            name = shown(str(record.id)) if record.id is not None else f"line {number}"
            key = (type(record.id).__name__, record.id) if record.id is not None else ("line", number)
            if key in seen:  # which of the two would be compared would depend on their order
                raise DataFileError(path, f"line {number}: id {record.id!r} is line {seen[key]}'s id too")
            seen[key] = number
            responses.append(Response(name, tokens, logprobs, entropies, tops, key))
    return responses


def shown(text: str) -> str:
    """An id as a terminal and a report may show it: control characters (a newline that would start a forged
    summary line, an escape sequence that retitles the terminal) written as escapes, the rest as it is."""
    if text.isprintable():
        return text
    return "".join(character if character.isprintable() else repr(character)[1:-1] for character in text)


COLUMNS = {"tokens": "q", "logprobs": "d", "entropies": "d"}
_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


def _parse_line(line: str, path: Path, number: int) -> dict[str, Any]:
    """One line's object, as json.loads gives it, except that a per-token column made only of numbers and
    nulls comes back as an array (8 bytes a value) read one value at a time: json.loads would hold a Python
    object and a pointer, some 32 bytes, for each. Anything else in a column (a string, a nested list) is
    returned as JSON has it, for _column to refuse by name."""
    from msprobe.core.errors import DataFileError

    scan, end = _DECODER.scan_once, len(line)

    def space(index: int) -> int:
        return _SPACE.match(line, index).end()  # type: ignore[union-attr]

    def expect(index: int, character: str, what: str) -> int:
        index = space(index)
        if index >= end or line[index] != character:
            raise json.JSONDecodeError(f"Expecting {what}", line, index)
        return index + 1

    def value(index: int) -> tuple[Any, int]:
        try:
            return scan(line, index)
        except StopIteration as stop:
            raise json.JSONDecodeError("Expecting value", line, stop.value) from None

    index = space(0)
    if index >= end or line[index] != "{":
        _, index = value(index)
        if space(index) != end:
            raise json.JSONDecodeError("Extra data", line, space(index))
        raise DataFileError(path, f"line {number} is not a JSON object")
    fields: dict[str, Any] = {}
    index = space(index + 1)
    if index < end and line[index] == "}":
        index += 1
    else:
        while True:
            index = expect(index, '"', "property name enclosed in double quotes")
            key, index = json.decoder.scanstring(line, index)
            index = space(expect(index, ":", "':' delimiter"))
            if key in COLUMNS and index < end and line[index] == "[":
                fields[key], index = _numbers(line, index, COLUMNS[key], value, space)
            else:
                fields[key], index = value(index)
            index = space(index)
            if index < end and line[index] == ",":
                index += 1
                continue
            index = expect(index, "}", "',' delimiter")
            break
    if space(index) != end:
        raise json.JSONDecodeError("Extra data", line, space(index))
    return fields


def _numbers(line: str, index: int, code: str, value: Any, space: Any) -> tuple[Any, int]:
    """A JSON list at ``index``, as an array of ``code`` when it holds only numbers (and nulls, as NaN, in a
    float column), else as the list json reads (read again from its start: that is the error path)."""
    start, column = index, array(code)
    index = space(index + 1)
    if index < len(line) and line[index] == "]":
        return column, index + 1
    while True:
        item, index = value(index)
        if type(item) is int or (code == "d" and (type(item) is float or item is None)):
            try:
                column.append(math.nan if item is None else item)
            except OverflowError:
                return value(start)
        else:
            return value(start)  # not a column of numbers: kept as JSON has it, for _column to refuse by name
        index = space(index)
        if index < len(line) and line[index] == ",":
            index = space(index + 1)
            continue
        if index < len(line) and line[index] == "]":
            return column, index + 1
        raise json.JSONDecodeError("Expecting ',' delimiter", line, index)


def _column(path: Path, number: int, field_name: str, values: Any, integers: bool) -> array | None:
    """One per-token field of a line as a compact array, checked strictly: a token ``12.0``, ``"12"`` or
    ``true`` is not a token a model gave, nor a log-probability ``"-0.5"`` (an integer one, 0, is; null is NaN).
    Only ``entropies`` may be left out."""
    from msprobe.core.errors import DataFileError

    where = f"line {number}: {field_name}"
    if values is None:
        if field_name == "entropies":
            return None
        raise DataFileError(path, f"{where}: field required")
    if isinstance(values, array):
        return values
    if not isinstance(values, list):
        raise DataFileError(path, f"{where}: must be a list")
    if integers:
        bad = next((index for index, value in enumerate(values) if type(value) is not int), None)
        kind = "an integer"
    else:
        bad = next((index for index, value in enumerate(values) if type(value) not in _NUMBERS), None)
        kind = "a number or null"
    if bad is not None:
        raise DataFileError(path, f"{where}.{bad}: must be {kind}, not {type(values[bad]).__name__}")
    column = array("q" if integers else "d")
    try:
        column.extend(values if integers else (math.nan if value is None else value for value in values))
    except OverflowError:
        raise DataFileError(path, f"{where}: holds a number out of range") from None
    return column


_NUMBERS = (float, int, type(None))  # bool is not among them: type(True) is bool


def write_rows(path: Path, columns: list[str], rows: Iterable[Iterable[Any]]) -> Path:
    """A report of the generation checks as CSV, cells made safe, written whole or not at all."""
    from msprobe.core.files import new_file
    from msprobe.core.spreadsheet import SafeWriter

    with new_file(path, "w", newline="") as handle:
        writer = SafeWriter(handle, lineterminator="\n")
        writer.write_header(columns)
        writer.writerows(rows)
    return path
