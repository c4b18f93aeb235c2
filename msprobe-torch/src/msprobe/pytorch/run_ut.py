"""``msprobe.pytorch.run_ut``, the path scripts import it by: the module lives at
``msprobe.pytorch.precheck.run_ut``, and this name is that very module (patches and ``isinstance`` agree)."""

import sys

from msprobe.pytorch.precheck import run_ut as _module

sys.modules[__name__] = _module
