"""Example pipelines on real data (run from the repository root, e.g. ``python -m examples.california``)."""
