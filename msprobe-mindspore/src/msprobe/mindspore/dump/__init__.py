"""MindSpore data dump: what needs MindSpore (hooks and tensors); the rest is in msprobe.core.dump."""
