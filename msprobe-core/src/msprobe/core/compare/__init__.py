"""Comparing two dumps: matching, metrics, results, advisor, report files."""
