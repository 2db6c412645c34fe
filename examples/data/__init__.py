"""Data sets shipped with the repository, each in its own folder with a README naming source and licence."""

from __future__ import annotations

from pathlib import Path

__all__ = ["CALIFORNIA_HOUSING"]

# Resolved from this file, so it is right from any working directory and in a fresh clone.
CALIFORNIA_HOUSING: Path = Path(__file__).resolve().parent / "california_housing" / "housing.csv"
