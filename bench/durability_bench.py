"""Durability figures, printed as rows of the bench table: group commit, recovery scan, reopen after a crash.

    python bench/durability_bench.py [--quick] [--dir PATH]

Kept for the command the top-level README quotes: it is ``python -m bench --only sync_flush,recovery,crash_reopen``
(the cases live in ``bench/run.py`` and ``bench/workloads.py``; ``bench/README.md`` says what each row measures).
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench.run import main  # noqa: E402

CASES = "sync_flush,recovery,crash_reopen"

if __name__ == "__main__":
    sys.exit(main(["--only", CASES] + sys.argv[1:]))
