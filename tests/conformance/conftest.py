import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # zoo and agreement, also read by dump_zoo.py
