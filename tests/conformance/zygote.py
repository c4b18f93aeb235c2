"""A dump driver that imports torch, transformers and the zoo's models once, then forks one child per dump.

Each of the conformance session's dumps runs in a process of its own, under one tool or the other; starting
Python and importing torch and transformers each time was most of a small model's dump. The zygote pays that
once per pytest worker and tool: a child forked from it has every module imported and no state of any run (no
torch operation has run in the zygote, no tool is imported), then runs dump_zoo.py's ``main`` as the script
would, and exits as the interpreter does (atexit handlers, the tool's final writes included).

Protocol, one JSON object per line: the request ``{"args": [...dump_zoo.py's arguments], "log": path}`` on
stdin; the answer ``{"code": exit code}`` on stdout once the child has exited.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

import torch  # noqa: F401
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dump_zoo

# the classes the zoo builds (transformers imports a model's code on first use)
for _name in ("LlamaForCausalLM", "BertForMaskedLM", "T5ForConditionalGeneration", "ViTForImageClassification",
              "GPT2LMHeadModel", "MambaForCausalLM"):  # fmt: skip
    getattr(transformers, _name)


def _child(request: dict) -> int:
    """Runs in the forked child: the dump, its output in the request's log."""
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    arguments = list(request["args"])
    sys.argv = [dump_zoo.__file__, *arguments]
    try:
        dump_zoo.main(*[a for a in arguments if not a.startswith("--")], float16="--float16" in arguments)
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


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
    sys.exit(code or 0)  # a child exits here, as the script would: atexit handlers and all
