"""`make bench`: run every benchmark and print its table (copy results into BENCHMARKS.md)."""

from __future__ import annotations

import importlib

MODULES = ["benchmarks.noise_costs", "benchmarks.accountant_speed"]

if __name__ == "__main__":
    for name in MODULES:
        print(f"\n## {name}\n")
        importlib.import_module(name).main()
