"""Forked runs of one tool: its imports made once, then one child forked per dump or per command.

Each of the conformance session's dumps, and each ``msprobe compare`` the tests run, is a process of its own
under one tool or the other; starting Python and importing torch, transformers or the tool's command line each
time was most of a small model's dump and of a small compare. A zygote pays that once per pytest worker, tool
and kind, and a child forked from it runs as the script or the command would, then exits as the interpreter
does (atexit handlers, the tool's final writes included).

- ``python zygote.py dump``: torch, transformers and the zoo's models imported, no tool (no torch operation has
  run, so a child starts with no state of any run); a child runs dump_zoo.py's ``main``.
- ``python zygote.py cli``: the environment's ``msprobe`` command imported; a child runs it with the request's
  arguments and environment variables.

Protocol, one JSON object per line: the request ``{"args": [...], "log": path, "env": {...}}`` on stdin (a
command's stderr goes to ``log`` + ".err"); the answer ``{"code": exit code}`` on stdout once the child has
exited.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

KIND = sys.argv[1] if len(sys.argv) > 1 else "dump"

if KIND == "dump":
    import torch  # noqa: F401
    import transformers

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import dump_zoo

    # the classes the zoo builds (transformers imports a model's code on first use)
    for _name in ("LlamaForCausalLM", "BertForMaskedLM", "T5ForConditionalGeneration", "ViTForImageClassification",
                  "GPT2LMHeadModel", "MambaForCausalLM"):  # fmt: skip
        getattr(transformers, _name)
else:
    from importlib.metadata import entry_points

    COMMAND = next(point for point in entry_points(group="console_scripts") if point.name == "msprobe").load()
    try:  # ours: the plugins found and their modules imported once (the reference has no such registry)
        from msprobe.core.plugins import get_registry

        get_registry()
    except ImportError:
        pass


def _redirect(path: str, fd: int) -> None:
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(handle, fd)
    os.close(handle)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def _child(request: dict) -> int:
    """Runs in the forked child: the dump or the command, its output in the request's log."""
    arguments = list(request["args"])
    _redirect(request["log"], 1)
    _redirect(request["log"] + ".err" if KIND == "cli" else request["log"], 2)
    os.environ.update(request.get("env") or {})
    try:
        if KIND == "dump":
            sys.argv = [dump_zoo.__file__, *arguments]
            dump_zoo.main(*[a for a in arguments if not a.startswith("--")], float16="--float16" in arguments)
            return 0
        sys.argv = ["msprobe", *arguments]
        return _exit_code(COMMAND())
    except SystemExit as exc:
        return _exit_code(exc.code)
    except BaseException:
        traceback.print_exc()
        return 1


def serve() -> int | None:
    """Answer requests until stdin closes (None); in a child, its exit code."""
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            return _child(request)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status)}), flush=True)
    return None


if __name__ == "__main__":
    code = serve()
    sys.stdout.flush()
    sys.exit(code or 0)  # a child exits here, as the script would: atexit handlers and all
