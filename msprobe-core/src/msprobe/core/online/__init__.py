"""Online pre-check: stream API inputs/outputs from training to a run_ut receiver (no pickle, ever)."""
