"""Where two runs part ways, and why: the one place msprobe decides it.

Every surface that answers the question (the compare summary and its advisor, ``compare --first-divergence``,
the graph page, the live md5 diff, multi-rank compares) asks :func:`diagnose_runs` or :func:`diagnose_pair`
and prints :meth:`Diagnosis.line`; the single-run surfaces (the flight recorder, ``db trend``) ask
:func:`first_nonfinite`. How it decides: docs/diagnosis.md.
"""

from msprobe.core.diagnosis.answer import CAUSES, DIVERGENCE, NONE, UNCERTAIN, Diagnosis
from msprobe.core.diagnosis.nonfinite import call_order, first_nonfinite
from msprobe.core.diagnosis.runs import diagnose_dumps, diagnose_pair, diagnose_runs, diagnosis_fits

__all__ = [
    "CAUSES",
    "DIVERGENCE",
    "NONE",
    "UNCERTAIN",
    "Diagnosis",
    "call_order",
    "diagnose_dumps",
    "diagnose_pair",
    "diagnose_runs",
    "diagnosis_fits",
    "first_nonfinite",
]
