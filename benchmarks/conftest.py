"""Make the benchmark helpers (``peers.py``) importable from the benchmark suites in this folder."""

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
