"""``config_check``: are two training runs the same setup? (mindstudio-probe 26.x's tool, in its spelling)

A collection ("pack", a zip file) holds what may change a run's numbers:
environment variables, installed package versions, hyperparameters (from a
launch script or YAML), and, collected inside the training script, CRC-32
checksums of the weights and of each batch the model is given, and the
order in which random APIs were called. Two packs compare item by item into
``result.xlsx`` with a pass/warning/error verdict per item.

Static collection needs no framework; the dynamic one asks the framework's
backend for a :class:`ConfigCheckProbe`.
"""

from __future__ import annotations

import atexit
import io
import json
import logging
import os
import re
import shlex
import sys
import threading
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar, Protocol

from msprobe.core.errors import DataFileError, UsageError
from msprobe.core.files import plain_yaml

logger = logging.getLogger(__name__)

PACK_FORMAT = 1
ITEMS = ("env", "pip", "hyperparameters", "weights", "dataset", "random")  # the documented order
# environment variables that change what a run computes or how (not, say, PATH or a token)
_ENV_PREFIXES = ("ASCEND_", "HCCL_", "NCCL_", "CUDA_", "CUBLAS_", "CUDNN_", "TORCH_", "PYTORCH_", "OMP_", "MKL_",
                 "MS_", "MINDSPORE_", "GLOG_", "TASK_QUEUE_", "INF_NAN_", "COMBINED_", "ACL_", "ATB_", "HF_", "NVTE_",
                 "MSPROBE_")  # fmt: skip
_ENV_NAMES = ("PYTHONHASHSEED", "CUBLAS_WORKSPACE_CONFIG", "LCCL_DETERMINISTIC", "CLOSE_MATMUL_K_SHIFT",
              "MULTI_STREAM_MEMORY_REUSE", "WORLD_SIZE", "LOCAL_WORLD_SIZE")  # fmt: skip
_SECRET = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|_KEY$|AUTH", re.IGNORECASE)
# a different version of one of these is an error; of any other package, a warning (26.x's rule)
KEY_PACKAGES = frozenset({"torch", "torch-npu", "torch_npu", "mindspore", "megatron-core", "mindspeed",
                          "mindspeed-llm", "transformers", "deepspeed", "apex", "transformer-engine", "numpy",
                          "accelerate", "peft", "triton"})  # fmt: skip
_MOST_MEMBER_BYTES = 256 << 20  # a pack member larger than this is not one msprobe wrote
_MOST_MEMBERS = 100_000


# -- what is collected --------------------------------------------------------------------
def environment() -> dict[str, str]:
    """The variables that may change a run's numbers; names that look like secrets are left out."""
    return {
        name: value
        for name, value in sorted(os.environ.items())
        if (name.startswith(_ENV_PREFIXES) or name in _ENV_NAMES) and not _SECRET.search(name)
    }


def packages() -> dict[str, str]:
    """Every installed distribution's version, by its normalised name."""
    found: dict[str, str] = {}
    for distribution in metadata.distributions():
        name = distribution.metadata.get("Name")
        if name:
            found.setdefault(re.sub(r"[-_.]+", "-", name).lower(), distribution.version)
    return dict(sorted(found.items()))


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value if isinstance(value, (str, int, float, bool)) or value is None else json.dumps(value)}


def _script_arguments(text: str) -> dict[str, Any]:
    """``--name value``, ``--name=value`` and ``--flag`` of a launch script, with simple ``$VAR`` substituted."""
    text = re.sub(r"\\\r?\n", " ", text)
    variables: dict[str, str] = {}
    found: dict[str, Any] = {}
    for raw_line in text.splitlines():
        line = raw_line.split("#", 1)[0].strip()
        if not line:
            continue
        assignment = re.match(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$", line)
        if assignment and " --" not in line:
            try:
                parts = shlex.split(assignment.group(2))
            except ValueError:
                parts = [assignment.group(2)]
            variables[assignment.group(1)] = parts[0] if parts else ""
            continue
        try:
            tokens = shlex.split(line)
        except ValueError:
            continue
        tokens = [re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: variables.get(m.group(1), m.group(0)), t)
                  for t in tokens]  # fmt: skip
        for index, token in enumerate(tokens):
            if not token.startswith("--") or len(token) == 2:
                continue
            name, equals, value = token[2:].partition("=")
            if equals:
                found[name] = value
            elif index + 1 < len(tokens) and not tokens[index + 1].startswith("--"):
                found[name] = tokens[index + 1]
            else:
                found[name] = True
    return found


def hyperparameters(files: Iterable[str | Path]) -> dict[str, Any]:
    """The training's hyperparameters from its launch scripts (``.sh``) and YAML configs, by name."""
    import yaml

    found: dict[str, Any] = {}
    for file in files:
        path = Path(file)
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise DataFileError(path, f"cannot be read ({exc.strerror or exc})") from None
        if path.suffix.lower() in (".yaml", ".yml"):
            try:
                data = plain_yaml(text)
            except RecursionError:
                raise DataFileError(path, "nested too deeply") from None
            except yaml.YAMLError as exc:
                raise DataFileError(path, f"invalid YAML ({exc.__class__.__name__})") from None
            if not isinstance(data, dict):
                raise DataFileError(path, "the YAML file must hold a mapping of hyperparameters")
            found.update(_flatten(data))
        else:
            found.update(_script_arguments(text))
    return found


# -- packs -----------------------------------------------------------------------------------
def _pack_bytes(members: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, value in members.items():
            archive.writestr(name, json.dumps(value, indent=1, ensure_ascii=False, sort_keys=False))
    return buffer.getvalue()


def write_pack(members: dict[str, Any], output: str | Path) -> Path:
    from msprobe.core.files import write_new_file

    output = Path(output)
    if output.suffix != ".zip":
        raise UsageError(f"{output}: a config_check pack is a .zip file")
    data = _pack_bytes(members)
    if output.exists():
        output.unlink()
    return write_new_file(output, lambda handle: handle.write(data))


def collect_static(files: Iterable[str | Path], output: str | Path) -> Path:
    """``config_check -d``: environment, packages and, from ``files``, hyperparameters."""
    members = {
        "manifest.json": {"tool": "msprobe", "format": PACK_FORMAT, "kind": "static"},
        "env.json": environment(),
        "pip.json": packages(),
        "hyperparameters.json": hyperparameters(files),
    }
    return write_pack(members, output)


_OBJECT_MEMBERS = ("manifest.json", "env.json", "pip.json", "hyperparameters.json")


def _check_member_type(path: Path, name: str, value: Any) -> None:
    """A member of the kind its item compares: an object of settings, or a per-step object or list."""
    if name in _OBJECT_MEMBERS and not isinstance(value, dict):
        raise DataFileError(path, f"member {name!r}: expected an object, not {type(value).__name__}")
    if name.startswith(("dataset/", "weights/", "random/")) and not isinstance(value, (dict, list)):
        raise DataFileError(path, f"member {name!r}: expected an object or a list, not {type(value).__name__}")


def read_pack(path: str | Path) -> dict[str, Any]:
    """A pack's members as values by name; anything but bounded JSON members is refused."""
    path = Path(path)
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise DataFileError(path, f"not a config_check pack ({exc})") from None
    members: dict[str, Any] = {}
    with archive:
        infos = archive.infolist()
        if len(infos) > _MOST_MEMBERS:
            raise DataFileError(path, f"holds {len(infos)} members, more than a pack has")
        for info in infos:
            if info.is_dir():
                continue
            if info.file_size > _MOST_MEMBER_BYTES or not info.filename.endswith(".json"):
                raise DataFileError(path, f"member {info.filename!r} is not one a pack holds")
            try:
                members[info.filename] = json.loads(archive.read(info))
            except (ValueError, zipfile.BadZipFile) as exc:
                raise DataFileError(path, f"member {info.filename!r} is not valid JSON ({exc})") from None
            except RecursionError:
                raise DataFileError(path, f"member {info.filename!r} is nested too deeply") from None
            _check_member_type(path, info.filename, members[info.filename])
    manifest = members.get("manifest.json")
    if not isinstance(manifest, dict) or manifest.get("tool") != "msprobe":
        raise DataFileError(path, "has no msprobe manifest.json: not a pack config_check -d or ConfigChecker wrote")
    return members


# -- comparing ---------------------------------------------------------------------------------
@dataclass
class ItemResult:
    item: str
    verdict: str  # "pass", "warning", "error", or "skipped" (neither pack holds it)
    rows: list[dict[str, Any]] = field(default_factory=list)  # one per key: key, bench, cmp, verdict


@dataclass
class PackComparison:
    items: list[ItemResult]
    output: Path

    @property
    def passed(self) -> bool:
        return all(result.verdict in ("pass", "skipped") for result in self.items)

    def first_difference(self) -> tuple[str, dict[str, Any]] | None:
        for result in self.items:
            for row in result.rows:
                if row["verdict"] != "pass":
                    return result.item, row
        return None

    def summary_line(self) -> str:
        first = self.first_difference()
        where = self.output / "result.xlsx"
        if first is None:
            return f"config_check: every item passes ({where})"
        item, row = first
        return (
            f"config_check: {item} differs first at {row['key']}: {_short(row['bench'])} (bench) vs "
            f"{_short(row['cmp'])} (cmp), {row['verdict']}; see {where}"
        )


def _short(value: Any) -> str:
    text = "missing" if value is None else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _compare_maps(item: str, bench: dict[str, Any] | None, cmp: dict[str, Any] | None,
                  severity: Callable[[str], str] = lambda key: "error") -> ItemResult:  # fmt: skip
    if bench is None and cmp is None:
        return ItemResult(item, "skipped")
    bench, cmp = bench or {}, cmp or {}
    rows = []
    for key in sorted(set(bench) | set(cmp)):
        a, b = bench.get(key), cmp.get(key)
        rows.append({"key": key, "bench": a, "cmp": b, "verdict": "pass" if a == b else severity(key)})
    verdicts = {row["verdict"] for row in rows}
    verdict = "error" if "error" in verdicts else "warning" if "warning" in verdicts else "pass"
    return ItemResult(item, verdict, rows)


def _grouped(members: dict[str, Any], item: str) -> dict[str, Any] | None:
    """Per-rank, per-step members (``weights/rank0/step3.json``) as one map keyed ``rank0/step3/name``."""
    prefix = f"{item}/"
    found = {name: value for name, value in members.items() if name.startswith(prefix)}
    if not found:
        return None
    flat: dict[str, Any] = {}
    for name, value in found.items():
        where = name[len(prefix) : -len(".json")]
        if isinstance(value, dict):
            flat.update({f"{where}/{key}": item_value for key, item_value in value.items()})
        elif isinstance(value, list):  # the random calls, in order
            flat.update({f"{where}/{index:06d}": call for index, call in enumerate(value)})
    return flat


def _pip_severity(key: str) -> str:
    return "error" if key in KEY_PACKAGES else "warning"


def compare_packs(bench_path: str | Path, cmp_path: str | Path, output: str | Path) -> PackComparison:
    """Compare two packs into ``output/result.xlsx`` (a summary sheet and one sheet per item)."""
    bench, cmp = read_pack(bench_path), read_pack(cmp_path)
    items = [
        _compare_maps("env", bench.get("env.json"), cmp.get("env.json")),
        _compare_maps("pip", bench.get("pip.json"), cmp.get("pip.json"), _pip_severity),
        _compare_maps("hyperparameters", bench.get("hyperparameters.json"), cmp.get("hyperparameters.json")),
        _compare_maps("weights", _grouped(bench, "weights"), _grouped(cmp, "weights")),
        _compare_maps("dataset", _grouped(bench, "dataset"), _grouped(cmp, "dataset")),
        _compare_maps("random", _grouped(bench, "random"), _grouped(cmp, "random")),
    ]
    result = PackComparison(items, Path(output))
    _write_result(result)
    return result


def _write_result(result: PackComparison) -> None:
    import pandas as pd

    from msprobe.core.files import make_dir, write_new_file
    from msprobe.core.spreadsheet import safe_cell

    make_dir(result.output)
    buffer = io.BytesIO()
    with pd.ExcelWriter(buffer, engine="xlsxwriter") as sheets:
        summary = pd.DataFrame([{"file_name": r.item, "pass_check": r.verdict} for r in result.items])
        summary.to_excel(sheets, sheet_name="summary", index=False)
        for item in result.items:
            table = pd.DataFrame(item.rows, columns=["key", "bench", "cmp", "verdict"])
            for column in ("key", "bench", "cmp"):
                table[column] = table[column].map(lambda v: safe_cell(v if isinstance(v, str) or v is None
                                                                       else json.dumps(v)))  # fmt: skip
            table.to_excel(sheets, sheet_name=item.item, index=False)
    data = buffer.getvalue()
    target = result.output / "result.xlsx"
    if target.exists():
        target.unlink()  # 26.x overwrites an earlier result in the same folder
    write_new_file(target, lambda handle: handle.write(data))


# -- collecting inside the training script ------------------------------------------------------
class ConfigCheckProbe(Protocol):
    """What a framework's backend gives the dynamic collection (``Backend.config_check_probe``)."""

    def rank(self) -> int: ...

    def parameters(self, model: Any) -> Iterable[tuple[str, Any]]: ...

    def is_tensor(self, value: Any) -> bool: ...

    def checksum(self, tensor: Any) -> str: ...

    def on_forward(self, model: Any, callback: Callable[[tuple, dict], None]) -> Any: ...

    def random_targets(self) -> list[tuple[Any, str, str]]: ...


def _seed_text(args: tuple, kwargs: dict) -> str:
    """The seed a seeding call was given, as text (None for a call that draws one itself)."""
    value = args[0] if args else kwargs.get("seed", kwargs.get("a"))
    text = repr(value)
    return text if len(text) <= 64 else text[:61] + "..."


def _python_random_targets() -> list[tuple[Any, str, str]]:
    import random

    targets = [(random, name, f"random.{name}") for name in ("seed", "random", "randint", "uniform", "shuffle",
                                                             "choice", "sample", "gauss")]  # fmt: skip
    try:
        import numpy.random as np_random
    except ImportError:
        return targets
    names = ("seed", "rand", "randn", "randint", "random", "shuffle", "permutation", "choice", "normal", "uniform")
    return targets + [(np_random, name, f"numpy.random.{name}") for name in names if hasattr(np_random, name)]


def _probe(fmk: str) -> ConfigCheckProbe:
    from msprobe.core.plugins import get_registry

    backend = get_registry().find_backend(fmk)
    return backend.config_check_probe()


def _caller() -> str:
    """Where the user's code called a random API: the first frame outside msprobe's packages."""
    import msprobe

    roots = tuple(str(Path(path).resolve()) for path in msprobe.__path__)  # every installed part of msprobe
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(roots):
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "?"


class ConfigChecker:
    """Dynamic collection, as in 26.x::

        ConfigChecker.apply_patches("pytorch")     # first thing in the script: random calls are logged
        ...
        ConfigChecker(model=model, shell_path=["train.sh"], output_zip_path="pack.zip", fmk="pytorch")

    Each forward call of ``model`` is one micro-step: the weights' and the
    batch's checksums are taken just before it runs. The pack is written at
    interpreter exit, or by :meth:`save`.
    """

    _random_calls: ClassVar[list[dict[str, str]]] = []  # one log per process, as the patches are
    _patcher: ClassVar[Any] = None
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def apply_patches(cls, fmk: str = "pytorch") -> None:
        """Log every call of a random API (Python's, numpy's, the framework's), in order, with its caller."""
        from msprobe.core.api_patch import ApiPatcher

        if cls._patcher is not None:
            return
        framework_targets = _probe(fmk or "pytorch").random_targets()

        def log(original: Callable, key: str, args: tuple, kwargs: dict) -> Any:
            call = {"api": key, "location": _caller()}
            if "seed" in key.rsplit(".", 1)[-1]:  # manual_seed(0) and manual_seed(1) are different setups
                call["seed"] = _seed_text(args, kwargs)
            with cls._lock:
                cls._random_calls.append(call)
            return original(*args, **kwargs)

        cls._patcher = ApiPatcher(log, lambda: _python_random_targets() + framework_targets)
        cls._patcher.install()

    def __init__(
        self,
        model: Any = None,
        shell_path: list[str] | str | None = None,
        output_zip_path: str = "",
        fmk: str = "",
    ):
        self.fmk = fmk or "pytorch"
        self.probe = _probe(self.fmk)
        self.output = Path(output_zip_path or "config_check_pack.zip")
        files = [shell_path] if isinstance(shell_path, str) and shell_path else list(shell_path or [])
        self.members: dict[str, Any] = {
            "manifest.json": {"tool": "msprobe", "format": PACK_FORMAT, "kind": "dynamic", "framework": self.fmk},
            "env.json": environment(),
            "pip.json": packages(),
            "hyperparameters.json": hyperparameters(files),
        }
        self.step = 0
        self.handle = None
        if model is not None:
            self.handle = self.probe.on_forward(model, lambda args, kwargs: self._micro_step(model, args, kwargs))
        atexit.register(self.save)

    def _micro_step(self, model: Any, args: tuple, kwargs: dict) -> None:
        try:
            rank, step = self.probe.rank(), self.step
            self.step += 1
            where = f"rank{rank}/step{step}.json"
            self.members[f"weights/{where}"] = {
                name: self.probe.checksum(value) for name, value in self.probe.parameters(model)
            }
            batch = {}
            for index, value in enumerate(args):
                if self.probe.is_tensor(value):
                    batch[f"args.{index}"] = self.probe.checksum(value)
            for key, value in kwargs.items():
                if self.probe.is_tensor(value):
                    batch[f"kwargs.{key}"] = self.probe.checksum(value)
            self.members[f"dataset/{where}"] = batch
        except Exception as exc:  # never break the training
            logger.warning("msprobe config_check: micro-step %d not collected: %s", self.step, exc)

    def save(self) -> Path | None:
        """Write the pack now (also done at exit); later micro-steps are added at the next save."""
        try:
            members = dict(self.members)
            with self._lock:
                calls = list(self._random_calls)
            rank = self.probe.rank()
            if self._patcher is not None:
                members[f"random/rank{rank}.json"] = calls
            output = self.output  # rank 0 writes the path given, every other rank its own beside it
            if rank:
                output = output.with_name(f"{output.stem}_rank{rank}{output.suffix}")
            return write_pack(members, output)
        except Exception as exc:
            logger.warning("msprobe config_check: the pack %s was not written: %s", self.output, exc)
            return None
