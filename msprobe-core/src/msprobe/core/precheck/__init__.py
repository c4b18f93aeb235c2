"""Accuracy pre-check (run_ut): precision standards, metrics and result files, framework-free."""
