"""``msprobe.pytorch.compile_check``, the path scripts import it by: the module lives at
``msprobe.pytorch.compile.check``, and this name is that very module (patches and ``isinstance`` agree)."""

import sys

from msprobe.pytorch.compile import check as _module

sys.modules[__name__] = _module
