"""Data files shipped with msprobe-core (the default MindSpore-to-PyTorch API table)."""
