"""The recording runtime: what runs inside the user's training to make a dump.

The per-task session (config, step and rank selection), the collector each backend's hooks hand their calls
to, the recorder skeleton, the filters, cuts and totals, the flight recorder, the live diff and debug saves.
It sits above the dump format (``msprobe.core.dump``: what a dump is, read and written) and above the
diagnosis, which the flight recorder and the live diff ask; neither of those imports this package.
"""
