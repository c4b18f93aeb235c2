"""``msprobe.pytorch.huggingface``, the path scripts import it by: the module lives at
``msprobe.pytorch.integrations.huggingface``, and this name is that very module (patches and ``isinstance`` agree)."""

import sys

from msprobe.pytorch.integrations import huggingface as _module

sys.modules[__name__] = _module
