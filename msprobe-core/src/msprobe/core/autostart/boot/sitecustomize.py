"""Imported at start-up by every Python process that ``msprobe run`` starts (it is first on PYTHONPATH)."""

try:
    from msprobe.core.autostart import install_from_environment, run_next_sitecustomize
except ImportError:  # a process whose Python has no msprobe: nothing to start
    pass
else:
    install_from_environment()
    run_next_sitecustomize()
