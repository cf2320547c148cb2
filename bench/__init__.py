"""rmqcore benchmarks: pytest-benchmark cases (``python -m pytest bench --benchmark-only``) and a runner that
prints one comparison table (``python -m bench``). Both use the workloads in ``bench/workloads.py``."""
