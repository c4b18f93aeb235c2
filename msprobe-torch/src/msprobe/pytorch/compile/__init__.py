"""compile_check: a model's compiled forward and backward against its eager run, kernel by kernel."""
