"""``msprobe.pytorch.online_dispatch``, the path scripts import it by: the module lives at
``msprobe.pytorch.precheck.online_dispatch``, and this name is that very module (patches and ``isinstance`` agree)."""

import sys

from msprobe.pytorch.precheck import online_dispatch as _module

sys.modules[__name__] = _module
