"""``python -m bench``: the side-by-side suite (see ``bench/run_all.py``)."""

from __future__ import annotations

import sys

from bench.run_all import main

if __name__ == "__main__":
    sys.exit(main())
