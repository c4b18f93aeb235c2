"""Self-contained HTML pages (the graph page, the trend page): a template in the package, data filled in.

Nothing is fetched by a page: the data sits in ``<script type="application/json">`` elements and the viewer
is inline, so a page works offline and can be mailed around.
"""

from __future__ import annotations

import importlib.resources
import json
import re
from typing import Any


def html_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_SCRIPT_UNSAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def script_json(value: Any, compact: bool = False) -> str:
    """JSON safe inside a <script> element. Not only ``</script>`` ends it early: ``<!--`` followed by
    ``<script`` puts the parser in a state where the real end tag is missed and the page goes blank. Every
    ``<``, ``>`` and ``&`` (they occur only inside JSON strings) is written as a unicode escape."""
    separators = (",", ":") if compact else None
    return json.dumps(value, ensure_ascii=False, separators=separators).translate(_SCRIPT_UNSAFE)


def fill(package: str, asset: str, fields: dict[str, str]) -> str:
    """The template ``asset`` of ``package`` with each ``__NAME__`` replaced, in one pass, so a value that
    spells a placeholder stays text."""
    template = importlib.resources.files(package).joinpath(asset).read_text("utf-8")
    pattern = "__(" + "|".join(map(re.escape, fields)) + ")__"
    return re.sub(pattern, lambda match: fields[match.group(1)], template)
