"""`make bench`: run every benchmark and print its table (results are recorded in BENCHMARKS.md).

An entry is a module (its ``main()`` runs) or ``module:function`` (that function, with no arguments)."""

from __future__ import annotations

import importlib
import importlib.util

MODULES = [
    "benchmarks.noise_costs",
    "benchmarks.accountant_speed",
    "benchmarks.kernel_speed",
    "benchmarks.allocator",
    "benchmarks.ambssgd_utility",
    "benchmarks.ambssgd_scale",
    "benchmarks.correlated_noise",
    "benchmarks.srgd_utility",
    "benchmarks.data_plane",
    "benchmarks.data_plane:shuffle_rounds",  # the copy/shuffle ratio's median over 5 interleaved rounds
    "benchmarks.step_overhead",
    "benchmarks.scale_simulation",
    "benchmarks.predict_memory",
    "benchmarks.kan_speed",
    "benchmarks.kan_california",
    "benchmarks.real_data",
    "benchmarks.never_worse",
    "benchmarks.multiclass",
    "benchmarks.user_level",
    "benchmarks.user_level:audit",
    "benchmarks.user_shuffle",
    "benchmarks.table_sources",
    "benchmarks.table_preprocess",
    "benchmarks.lake_defaults",
    "benchmarks.ssp_crossover",
    "benchmarks.srgd_crossover",
    "benchmarks.step_oracle",
    "benchmarks.preconditioner",
    "benchmarks.private_search",
    "benchmarks.kan_correlation",
    "benchmarks.privacy_audit",
    "benchmarks.cli_startup",
    "benchmarks.command_wall",
    "benchmarks.opacus_compare",
]

if __name__ == "__main__":
    for name in MODULES:
        print(f"\n## {name}\n", flush=True)
        if name.endswith("opacus_compare") and importlib.util.find_spec("opacus") is None:
            print(
                "skipped: Opacus is not installed; run `make bench-peers` (installs torch 2.13.0 CPU and opacus)"
            )
            continue
        module, _, function = name.partition(":")
        getattr(importlib.import_module(module), function or "main")()
