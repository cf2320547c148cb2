"""What the bench's report headers say about the machine: one module both bench/run.py and bench/peers.py import,
so neither imports the other for it (run.py starts peers' workload; peers.py only needs the CPU's name)."""
from __future__ import annotations

import platform


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
