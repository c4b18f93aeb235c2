"""The accuracy pre-check on PyTorch: run_ut and multi_run_ut, online dispatch, and the overflow re-run."""
