"""Generated responses as msprobe reads them: JSON lines, one response each, checked field by field."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MOST_BYTES = 1 << 30  # a responses file larger than this is refused rather than read


@dataclass(frozen=True)
class Response:
    name: str
    tokens: list[int]
    logprobs: list[float]
    entropies: list[float] | None = None
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

    class Record(BaseModel):
        model_config = ConfigDict(extra="ignore")
        id: StrictStr | StrictInt | None = None
        tokens: list[StrictInt]
        logprobs: list[Number | None]
        entropies: list[Number | None] | None = None
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
            try:
                record = Record.model_validate(json.loads(line))
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
            for field_name in ("logprobs", "entropies", "top_logprobs"):
                values = getattr(record, field_name)
                if values is not None and len(values) != len(record.tokens):
                    raise DataFileError(path, f"line {number}: field {field_name!r} has {len(values)} values for "
                                              f"{len(record.tokens)} tokens")  # fmt: skip
            entropies = None if record.entropies is None else [_number(value) for value in record.entropies]
            tops = None if record.top_logprobs is None else [dict(top) for top in record.top_logprobs]
            name = shown(str(record.id)) if record.id is not None else f"line {number}"
            key = (type(record.id).__name__, record.id) if record.id is not None else ("line", number)
            if key in seen:  # which of the two would be compared would depend on their order
                raise DataFileError(path, f"line {number}: id {record.id!r} is line {seen[key]}'s id too")
            seen[key] = number
            logprobs = [_number(value) for value in record.logprobs]
            responses.append(Response(name, record.tokens, logprobs, entropies, tops, key))
    return responses


def shown(text: str) -> str:
    """An id as a terminal and a report may show it: control characters (a newline that would start a forged
    summary line, an escape sequence that retitles the terminal) written as escapes, the rest as it is."""
    if text.isprintable():
        return text
    return "".join(character if character.isprintable() else repr(character)[1:-1] for character in text)


def _number(value: float | None) -> float:
    return math.nan if value is None else float(value)


def write_rows(path: Path, columns: list[str], rows: Iterable[Iterable[Any]]) -> Path:
    """A report of the generation checks as CSV, cells made safe, written whole or not at all."""
    from msprobe.core.files import new_file
    from msprobe.core.spreadsheet import SafeWriter

    with new_file(path, "w", newline="") as handle:
        writer = SafeWriter(handle, lineterminator="\n")
        writer.write_header(columns)
        writer.writerows(rows)
    return path
