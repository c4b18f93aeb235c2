"""The compare entry points: the reference's Python functions and what the CLI calls.

``compare(input_param, output_path, ...)`` compares two single-rank dumps;
``compare_distributed(npu_dump_dir, bench_dump_dir, output_path, ...)``
compares every rank pair of two step folders, one process per pair.
"""

from __future__ import annotations

import gc
import json
import logging
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from msprobe.core.compare.mapping import NameMapper
from msprobe.core.compare.pipeline import compare_in_memory
from msprobe.core.compare.report import timestamp
from msprobe.core.compare.tables import CompareResult, tensor_loader
from msprobe.core.config import config_error_from_validation
from msprobe.core.diagnosis import DIVERGENCE, NONE, Diagnosis, diagnose_dumps, diagnose_runs, diagnosis_fits
from msprobe.core.diagnosis.runs import COMPARE_DIAGNOSED_BYTES, step_and_rank_of
from msprobe.core.dump.layout import dump_folders, is_dump_folder, labels_order, step_and_rank_of_labels
from msprobe.core.dump.reader import read_dump, read_stack_file
from msprobe.core.errors import DataFileError, MsprobeError, UsageError
from msprobe.core.files import make_dir, regular_file, write_json_atomic, write_new_text
from msprobe.core.generation.compare import is_generation_file
from msprobe.core.jobs import Engine, activity, run_jobs
from msprobe.core.tensor_files import tensor_readers

logger = logging.getLogger(__name__)


class CompareInput(BaseModel):
    """compare.json (the reference's fields)."""

    model_config = ConfigDict(extra="forbid")
    npu_path: str
    bench_path: str
    stack_path: str | None = None
    is_print_compare_log: bool = True


@dataclass
class CompareSummary:
    mode: str
    rows: int
    suspicious: int
    unmatched: int
    diagnosis: Diagnosis | None  # where the runs part ways (None: not asked for, with -c)
    files: list[Path] = field(default_factory=list)
    rank: str | None = None
    answer: str = ""  # what a compare without a diagnosis says instead (two generations: where they part ways)
    step: int | None = None
    # runs of other layouts: what should be alike on every rank and is not (see msprobe.core.parallel)
    rank_findings: list[str] = field(default_factory=list)
    # the folders compared, when they are not the ones compare.json names (ranks merged), and their layouts differ
    compared: tuple[Path, Path] | None = None
    note: str = ""  # what was done to compare them, said once before the summaries

    @property
    def where(self) -> str:
        """Which dump this is: "step 2 rank 1", "rank 1", "step 2", or "" for a compare of one dump."""
        return " ".join(part for part in (
            f"step {self.step}" if self.step is not None else "", f"rank {self.rank}" if self.rank else ""
        ) if part)  # fmt: skip

    @property
    def verdict(self) -> str:
        """NO DATA when no value of one side found a partner (an empty side included): nothing was compared.
        Else the diagnosis decides when it is sure (the runs part ways, or every output is bit-identical), and
        the count of values beyond the reference's thresholds when it is not (or was not asked)."""
        if self.rows == self.unmatched:
            return "NO DATA"
        if self.rank_findings:
            return "SUSPICIOUS"
        if self.diagnosis is not None and self.diagnosis.verdict in (DIVERGENCE, NONE):
            return "SUSPICIOUS" if self.diagnosis.verdict == DIVERGENCE else "PASS"
        if self.compared is not None and _rounding_alone(self.diagnosis):
            return "PASS"  # runs of other layouts sum in another order: rounding is what they should differ by
        if self.suspicious == 0:
            return "PASS"
        return "SUSPICIOUS"

    @property
    def exit_code(self) -> int:
        return {"PASS": 0, "SUSPICIOUS": 1}.get(self.verdict, 2)

    def line(self) -> str:
        where = f"{self.where}: " if self.where else ""
        answer = f"; {self.diagnosis.line()}" if self.diagnosis is not None else ""
        if self.compared is not None and _rounding_alone(self.diagnosis):
            answer = (
                f"; the runs agree to rounding (relative error {self.diagnosis.error:.1e} from "
                f"{self.diagnosis.api} on, nothing out of proportion): runs of other layouts sum in another order"
            )
        answer = answer or (f"; {self.answer}" if self.answer else "")
        if self.rank_findings:
            more = len(self.rank_findings) - 1
            if self.diagnosis is not None and self.diagnosis.cause == "ranks":  # the answer is the first of them
                answer += f"; and {more} more value(s) the ranks disagree on" if more else ""
            else:
                answer += f"; ranks disagree: {self.rank_findings[0]}" + (f" (and {more} more)" if more else "")
        compared = self.rows - self.unmatched
        return (
            f"{where}{self.verdict}: {compared} values compared in {self.mode} mode, {self.suspicious} suspicious, "
            f"{self.unmatched} unmatched{answer}"
        )


def _rounding_alone(diagnosis: Diagnosis | None) -> bool:
    """The diagnosis measured the runs to differ by rounding alone, nothing out of proportion anywhere."""
    return (
        diagnosis is not None
        and diagnosis.verdict == "uncertain"
        and diagnosis.cause == "computation"
        and diagnosis.error is not None
        and math.isfinite(diagnosis.error)
    )


def overall_line(summaries: list[CompareSummary]) -> str:
    """The verdict over the ranks of a multi-rank compare: how many pass, which do not, and the worst one (no
    data first, then the most suspicious values)."""
    failing = [s for s in summaries if s.verdict != "PASS"]
    kind = "ranks" if all(s.step is None for s in summaries) else "dumps"
    if not failing:
        return f"overall: PASS: all {len(summaries)} {kind} pass"
    worst = max(failing, key=lambda s: (s.exit_code, s.suspicious, s.unmatched))
    verdict = "NO DATA" if all(s.verdict == "NO DATA" for s in summaries) else "SUSPICIOUS"
    listed = ", ".join(f"{s.where} ({s.verdict})" for s in failing[:8]) + (", ..." if len(failing) > 8 else "")
    return (
        f"overall: {verdict}: {len(summaries) - len(failing)} of {len(summaries)} {kind} pass; not passing: "
        f"{listed}; worst: {worst.where} ({worst.suspicious} suspicious, {worst.unmatched} unmatched)"
    )


def read_compare_json(path: str | Path, model: type[BaseModel] = CompareInput) -> Any:
    """compare.json validated against ``model`` (the graph command allows a missing bench_path)."""
    file = regular_file(path, "compare.json")
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataFileError(file, "compare.json not found") from None
    except json.JSONDecodeError as exc:
        raise DataFileError(file, f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except UnicodeDecodeError:
        raise DataFileError(file, "is not UTF-8 text") from None
    except RecursionError:
        raise DataFileError(file, "nested too deeply to be a compare.json") from None
    except OSError as exc:  # a folder given for the file, no permission...
        raise DataFileError(file, f"cannot be read ({exc.strerror})") from None
    if not isinstance(raw, dict):
        raise DataFileError(file, "top level must be an object")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise config_error_from_validation(exc, file) from None


def registered_metrics() -> tuple:
    """Every metric column, built-in and plugins'; each plugin is isolated by the registry, so one broken
    plugin drops only its own."""
    from msprobe.core.plugins import get_registry

    return tuple(get_registry().compare_metrics())


def check_tensor_readers(result_dumps: tuple, readers: dict[str, Any]) -> None:
    for dump in result_dumps:
        if dump.task != "tensor":
            continue
        for entry in dump.data.values():
            names = json.dumps(entry)
            if '.pt"' in names and ".pt" not in readers:
                raise MsprobeError(f"{dump.path}: tensor files are .pt; install msprobe-torch to read them")
            break


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cycle collector off while a compare builds millions of small objects: it would walk them all
    again and again (half the time of a large compare) to find no cycles. It is restored afterwards."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


IN_MEMORY_MAX_ENV = "MSPROBE_COMPARE_MEMORY_MAX_GB"
IN_MEMORY_MAX_GB = 2.0  # of dump.json: the in-memory compare holds some 15 bytes for each byte of them


def _why_in_memory(fuzzy_match: bool, mapped: bool) -> str:
    if fuzzy_match or mapped:
        return "fuzzy_match and name mappings are compared in memory"
    return "MSPROBE_COMPARE_STREAM=never, or no streamed reader here"


def _may_compare_in_memory(npu_json: Path, bench_json: Path, why: str) -> None:
    """Refuse an in-memory compare of dumps so large it would exhaust the machine, saying why it is needed."""
    try:
        limit = float(os.environ.get(IN_MEMORY_MAX_ENV, IN_MEMORY_MAX_GB))
    except ValueError:
        raise UsageError(f"{IN_MEMORY_MAX_ENV} must be a number of GiB") from None
    size = sum(path.stat().st_size for path in (npu_json, bench_json) if path.is_file())
    if size > limit * 2**30:
        raise UsageError(
            f"{npu_json} and {bench_json} hold {size / 2**30:.1f} GiB of dump.json, to be compared in memory "
            f"({why}): that needs about {size * 15 / 2**30:.0f} GiB. Set {IN_MEMORY_MAX_ENV} to a larger "
            f"number of GiB to allow it (now {limit:g})"
        )


def stack_source(npu_json: Path, stack_path: str | None, stack_mode: bool) -> Path | None:
    """The stack.json whose frames fill NPU_Stack_Info, or None for no such column.

    As the reference's compare: a compare.json naming ``stack_path`` gets the column when ``-s`` asks for it;
    one that does not gets it whenever a stack.json lies beside the NPU dump.json, ``-s`` or not."""
    if stack_path is not None:
        if not stack_mode:
            return None
        file = Path(stack_path)
        if not file.is_file():
            raise DataFileError(file, "compare.json's stack_path: no such file")
        return file
    beside = Path(npu_json).parent / "stack.json"
    if beside.is_file():
        logger.info("compare.json names no stack_path: NPU_Stack_Info comes from %s", beside)
        return beside
    return None


def compare_pair(
    npu_json: Path,
    bench_json: Path,
    output_dir: Path,
    stack_mode: bool | Path = False,
    auto_analyze: bool = True,
    fuzzy_match: bool = False,
    stamp: str | None = None,
    prefix: str = "compare_result",
    mappings: dict[str, Any] | None = None,
    diagnosis_limit: int | None = None,
    other_layout: bool = False,
) -> tuple[CompareSummary, CompareResult]:
    """``stack_mode``: True for the stacks of the stack.json beside the NPU dump, or the stack.json to read.
    ``diagnosis_limit``: the dump.json bytes (both sides) the diagnosis reads, ``COMPARE_DIAGNOSED_BYTES`` by
    default; ``--first-divergence`` raises it, and the verdict then rests on that same diagnosis."""
    with collector_paused():
        return _compare_pair(
            npu_json, bench_json, output_dir, stack_mode, auto_analyze, fuzzy_match, stamp, prefix, mappings,
            diagnosis_limit or COMPARE_DIAGNOSED_BYTES, other_layout,
        )  # fmt: skip


def _compare_pair(
    npu_json: Path,
    bench_json: Path,
    output_dir: Path,
    stack_mode: bool | Path,
    auto_analyze: bool,
    fuzzy_match: bool,
    stamp: str | None,
    prefix: str,
    mappings: dict[str, Any] | None,
    diagnosis_limit: int,
    other_layout: bool = False,
) -> tuple[CompareSummary, CompareResult | None]:
    from msprobe.core.compare import large  # for large dumps only: not imported by a small compare's start

    options = {key: value for key, value in (mappings or {}).items() if value}
    stamp = stamp or timestamp()
    if large.wanted(Path(npu_json), Path(bench_json), fuzzy_match, bool(options)):
        try:
            streamed = large.compare_blockwise(
                Path(npu_json), Path(bench_json), Path(output_dir), stamp, prefix, stack_mode, registered_metrics()
            )
        except large.NeedsWholeDumps as reason:
            _may_compare_in_memory(Path(npu_json), Path(bench_json), str(reason))
            logger.warning("msprobe compare: %s; comparing in memory, which holds both dumps whole", reason)
        else:
            diagnosis = None
            if auto_analyze:
                diagnosis = _diagnose(Path(npu_json), Path(bench_json), None, None, None, diagnosis_limit, other_layout)
                streamed.files.append(_write_advisor(diagnosis, Path(output_dir), prefix, stamp))
            summary = CompareSummary(
                streamed.mode, streamed.rows, streamed.suspicious, streamed.unmatched, diagnosis, streamed.files
            )
            return summary, None
    else:
        _may_compare_in_memory(Path(npu_json), Path(bench_json), _why_in_memory(fuzzy_match, bool(options)))
    npu, bench = read_dump(npu_json), read_dump(bench_json)
    if isinstance(stack_mode, Path):
        npu.stack = read_stack_file(stack_mode)
    readers = tensor_readers()
    check_tensor_readers((npu, bench), readers)
    cross = bool(npu.framework and bench.framework and npu.framework != bench.framework)
    cross = bool(options.pop("cross_framework", False)) or cross
    mapper = NameMapper(cross_framework=cross, **options)
    counts, result = compare_in_memory(
        npu,
        bench,
        Path(output_dir),
        stamp,
        prefix,
        fuzzy=fuzzy_match,
        stack=bool(stack_mode),
        load=tensor_loader(readers),
        mapping=mapper if mapper.active else None,
        metrics=registered_metrics(),
    )
    diagnosis = None
    if auto_analyze:
        translate = mapper if mapper.active else None
        diagnosis = _diagnose(Path(npu_json), Path(bench_json), npu, bench, translate, diagnosis_limit, other_layout)
        counts.files.append(_write_advisor(diagnosis, Path(output_dir), prefix, stamp))
    summary = CompareSummary(counts.mode, counts.rows, counts.suspicious, counts.unmatched, diagnosis, counts.files)
    return summary, result


def _diagnose(
    npu_json: Path, bench_json: Path, npu: Any, bench: Any, translate: Any, limit: int, other_layout: bool = False
) -> Diagnosis:
    """Where the two dumps part ways (msprobe.core.diagnosis); dumps too large for it get an answer that says
    so rather than none."""
    fits, why = diagnosis_fits(npu_json, bench_json, limit=limit)
    if not fits:
        return Diagnosis("uncertain", detail=why, confidence="low")
    with activity("compare", "finding where the runs part ways"):
        if npu is None or bench is None:
            npu, bench = read_dump(npu_json), read_dump(bench_json)
        found = diagnose_dumps(npu, bench, translate, other_layout=other_layout)[0]
    found.step, found.rank = step_and_rank_of(npu.folder)
    return found


def _write_advisor(diagnosis: Diagnosis, output_dir: Path, prefix: str, stamp: str) -> Path:
    advisor_name = prefix.replace("compare_result", "advisor", 1)
    return write_new_text(output_dir / f"{advisor_name}_{stamp}.txt", diagnosis.text() + "\n")


def compare(
    input_param: dict[str, Any],
    output_path: str | Path,
    stack_mode: bool = False,
    auto_analyze: bool = True,
    fuzzy_match: bool = False,
    mappings: dict[str, Any] | None = None,
    **_ignored: Any,
) -> CompareSummary:
    """The reference's ``compare``: input_param holds npu_json_path/bench_json_path (or npu_path/bench_path).

    ``mappings`` may hold api_mapping, cell_mapping, data_mapping and layer_mapping file paths.
    """
    npu = input_param.get("npu_json_path") or input_param.get("npu_path")
    bench = input_param.get("bench_json_path") or input_param.get("bench_path")
    if not npu or not bench:
        raise MsprobeError("input_param needs npu_json_path and bench_json_path")
    stacks = stack_source(Path(npu), input_param.get("stack_json_path") or input_param.get("stack_path"), stack_mode)
    summary, _ = compare_pair(
        Path(npu), Path(bench), Path(output_path), stacks or False, auto_analyze, fuzzy_match, mappings=mappings
    )
    return summary


def _compare_one(args: tuple) -> CompareSummary:
    labels, npu_json, bench_json, output_dir, stack_mode, auto_analyze, fuzzy_match, stamp, mappings, limit = args[:10]
    other_layout = args[10] if len(args) > 10 else False
    step, rank = step_and_rank_of_labels(labels)
    number = "" if rank is None else str(rank)
    prefix = f"compare_result_rank{number}" if number else "compare_result"
    summary, _ = compare_pair(
        npu_json, bench_json, output_dir, stack_mode, auto_analyze, fuzzy_match, stamp, prefix, mappings, limit,
        other_layout,
    )  # fmt: skip
    summary.rank, summary.step = (number or None), step
    return summary


def compare_distributed(
    npu_dump_dir: str | Path,
    bench_dump_dir: str | Path,
    output_path: str | Path,
    stack_mode: bool = False,
    auto_analyze: bool = True,
    fuzzy_match: bool = False,
    processes: int | None = None,
    mappings: dict[str, Any] | None = None,
    engine: Engine | None = None,
    diagnosis_limit: int | None = None,
    **_ignored: Any,
) -> list[CompareSummary]:
    """Compare each rank of two step folders, or each step and rank of two whole ``dump_path`` folders; the
    pairs run on ``engine`` (default: ``processes`` local worker processes). A step's results go in a folder of
    its own (``output_path/step{N}``), under the names a one-step compare gives them.

    Runs of other layouts (8 ranks against 1, FSDP2 against DDP) are compared as the global runs they
    compute: each step's ranks are merged first (see msprobe.core.parallel.runs)."""
    from msprobe.core.parallel.runs import first_answer, name_the_ranks, name_the_stage, prepare

    prepared = prepare(Path(npu_dump_dir), Path(bench_dump_dir), Path(output_path))
    if prepared.merged:
        logger.info("msprobe compare: %s", prepared.words)
        npu_dump_dir, bench_dump_dir = prepared.npu, prepared.bench
    summaries = _compare_folders(
        Path(npu_dump_dir), Path(bench_dump_dir), Path(output_path), stack_mode, auto_analyze, fuzzy_match,
        processes, mappings, engine, diagnosis_limit, prepared.merged,
    )  # fmt: skip
    for summary in summaries:
        findings = prepared.findings.get(summary.step, [])
        summary.rank_findings = [finding.line() for finding in findings]
        summary.compared = (prepared.npu, prepared.bench) if prepared.merged else None
        summary.note = prepared.words
        if not prepared.merged or summary.diagnosis is None:
            continue
        answer = summary.diagnosis
        if findings:
            answer = first_answer(answer, findings, prepared.places.get(summary.step, {}), prepared.ranks)
        step = f"step{summary.step}" if summary.step is not None else ""
        before = answer.as_dict()
        answer = name_the_ranks(answer, prepared.npu / step / "rank", prepared.bench / step / "rank")
        answer = name_the_stage(answer, prepared.stage_of.get(summary.step, {}))
        if answer is not summary.diagnosis or answer.as_dict() != before:
            summary.diagnosis = answer
            _rewrite_advisor(summary, answer)
    if prepared.merged and any(prepared.findings.values()):
        _write_rank_findings(prepared.findings, Path(output_path), summaries)
    return summaries


def _write_rank_findings(findings: dict, output_dir: Path, summaries: list[CompareSummary]) -> None:
    """rank_consistency_{timestamp}.json: by step, what should be alike on every rank and is not."""
    written = output_dir / f"rank_consistency_{timestamp()}.json"
    by_step = {
        str(step): [{**vars(finding), "words": finding.said(), "line": finding.line()} for finding in step_findings]
        for step, step_findings in findings.items()
    }
    write_json_atomic(written, by_step, indent=2)
    for summary in summaries:
        if summary.rank_findings:
            summary.files.append(written)


def _compare_folders(
    npu_dump_dir: Path,
    bench_dump_dir: Path,
    output_path: Path,
    stack_mode: bool,
    auto_analyze: bool,
    fuzzy_match: bool,
    processes: int | None,
    mappings: dict[str, Any] | None,
    engine: Engine | None,
    diagnosis_limit: int | None,
    other_layout: bool,
) -> list[CompareSummary]:
    npu_folders = dump_folders(Path(npu_dump_dir), "npu_path")
    bench_folders = dump_folders(Path(bench_dump_dir), "bench_path")
    shared = sorted(set(npu_folders) & set(bench_folders), key=labels_order)
    if not shared:
        raise DataFileError(
            Path(npu_dump_dir),
            f"no step or rank folder in common with {bench_dump_dir} (npu_path holds {_listed(npu_folders)}; "
            f"bench_path holds {_listed(bench_folders)})",
        )
    missing = sorted(" ".join(labels) for labels in set(npu_folders) ^ set(bench_folders))
    if missing:
        logger.warning("folders present on one side only are not compared: %s", ", ".join(missing))
    stamp = timestamp()
    jobs = []
    for labels in shared:
        output = Path(output_path)
        step = next((label for label in labels if label.startswith("step")), None)
        output = output / step if step else output
        jobs.append((
            labels, npu_folders[labels] / "dump.json", bench_folders[labels] / "dump.json", output, stack_mode,
            auto_analyze, fuzzy_match, stamp, mappings, diagnosis_limit, other_layout,
        ))  # fmt: skip
    what = "dumps" if any(label.startswith("step") for labels in shared for label in labels) else "ranks"
    return run_jobs(_compare_one, jobs, engine or Engine(workers=processes), what)


def _listed(folders: dict[tuple[str, ...], Path]) -> str:
    names = sorted((" ".join(labels) or "one dump" for labels in folders), key=lambda name: (len(name), name))
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


def run_compare_json(
    compare_json: str | Path,
    output_path: str | Path,
    stack_mode: bool = False,
    compare_only: bool = False,
    fuzzy_match: bool = False,
    mappings: dict[str, Any] | None = None,
    engine: Engine | None = None,
    consistent: bool = False,
    tolerance: float | None = None,
    diagnosis_limit: int | None = None,
) -> list[CompareSummary]:
    """What ``msprobe compare -i compare.json`` does: one dump, or every step and rank the paths hold (a step
    folder, a whole dump_path), decided by the paths; two files of responses token by token (``consistent``:
    the train/infer consistency check)."""
    spec = read_compare_json(compare_json)
    npu, bench = Path(spec.npu_path), Path(spec.bench_path)
    if is_generation_file(npu) or is_generation_file(bench) or consistent:
        return [_compare_generations(npu, bench, Path(output_path), consistent, tolerance)]
    if (npu.is_dir() and not is_dump_folder(npu)) or (bench.is_dir() and not is_dump_folder(bench)):
        return compare_distributed(
            npu, bench, output_path, stack_mode, not compare_only, fuzzy_match, mappings=mappings, engine=engine,
            diagnosis_limit=diagnosis_limit,
        )  # fmt: skip
    stacks = stack_source(npu, spec.stack_path, stack_mode)
    summary, _ = compare_pair(
        npu, bench, Path(output_path), stacks or False, not compare_only, fuzzy_match, mappings=mappings,
        diagnosis_limit=diagnosis_limit,
    )  # fmt: skip
    return [summary]


def _compare_generations(
    npu: Path, bench: Path, output_dir: Path, consistent: bool = False, tolerance: float | None = None
) -> CompareSummary:
    """Two files of generated responses (JSON lines), token by token (msprobe.core.generation.compare);
    ``consistent``: the same tokens scored by training (``npu``) and inference (``bench``)."""
    from msprobe.core.generation.compare import TOLERANCE, compare_generation_files

    for path in (npu, bench):
        if not is_generation_file(path):
            raise DataFileError(path, "is not a file of responses (.jsonl) like the other side")
    make_dir(output_dir)
    tolerance = TOLERANCE if tolerance is None else tolerance  # 0 nats is a tolerance too
    found = compare_generation_files(npu, bench, output_dir, timestamp(), tolerance, consistent)
    answers = [answer.line() for answer in found.answers if not answer.agrees]
    if found.unmatched:  # a request one run answered and the other did not is a difference, not a pass
        answers.insert(0, f"{found.unmatched} request(s) on one side only")
    agreeing = len(found.answers) - len(answers)
    if found.consistency is not None:
        answers.insert(0, found.consistency.line())
    answer = "; ".join(answers[:4]) + (f"; and {len(answers) - 4} more" if len(answers) > 4 else "")
    if agreeing:
        answer = (answer + "; " if answer else "") + f"{agreeing} request(s) agree"
    rows = found.rows + found.unmatched  # an unpaired response is an unmatched row of its own
    suspicious = found.suspicious + found.unmatched
    return CompareSummary("generation", rows, suspicious, found.unmatched, None, found.files, answer=answer)


def diagnose_compare_json(
    compare_json: str | Path, output_path: str | Path | None = None
) -> tuple[Diagnosis, Path | None]:
    """Where the runs of compare.json part ways, over every step and rank its paths hold (one dump.json each,
    or step/rank folders); written to ``first_divergence_{timestamp}.json`` in ``output_path`` when given."""
    spec = read_compare_json(compare_json)
    npu, bench = Path(spec.npu_path), Path(spec.bench_path)
    npu, bench = (npu.parent, bench.parent) if npu.is_file() else (npu, bench)
    diagnosis = diagnose_runs(npu, bench)
    return diagnosis, (None if output_path is None else write_first_divergence(diagnosis, output_path))


def write_first_divergence(diagnosis: Diagnosis, output_path: str | Path) -> Path:
    """``first_divergence_{timestamp}.json``: the answer as a dict."""
    make_dir(Path(output_path))
    written = Path(output_path) / f"first_divergence_{timestamp()}.json"
    write_json_atomic(written, diagnosis.as_dict(), indent=2)
    return written


def diagnose_across(compare_json: str | Path, summaries: list[CompareSummary]) -> Diagnosis:
    """The answer over every step and rank of a multi-dump compare, made the verdict of the dump it names.

    Each dump's own diagnosis sees that dump alone; the answer over all of them also weighs the steps before
    (a noisy step, an argument whose effect shows later, an undumped optimizer step). Where it finds the runs
    part ways, that dump's verdict, summary line and advisor file say so too: one command, one answer."""
    compared = next((summary.compared for summary in summaries if summary.compared is not None), None)
    if compared is not None:  # ranks merged: the answer over the merged runs, of other layouts
        answer = diagnose_runs(compared[0], compared[1], other_layout=True)
    else:
        answer, _ = diagnose_compare_json(compare_json)
    if answer.verdict != DIVERGENCE:
        return answer
    for summary in summaries:
        if summary.step != answer.step or summary.rank != (None if answer.rank is None else str(answer.rank)):
            continue
        if summary.diagnosis is None or summary.diagnosis.as_dict() != answer.as_dict():
            summary.diagnosis = answer
            _rewrite_advisor(summary, answer)
    return answer


def _rewrite_advisor(summary: CompareSummary, answer: Diagnosis) -> None:
    for file in summary.files:
        if file.name.startswith("advisor"):
            write_new_text(file, answer.text() + "\n")
