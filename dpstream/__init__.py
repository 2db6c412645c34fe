"""dpstream: single-pass differentially private training over data lakes.

The DP core. It imports neither Dask nor Prefect (see DESIGN.md): ``dpstream.privacy`` (exact
accountant, events, calibration, ledger) and ``dpstream.noise`` (replayable noise processes).
"""

__version__ = "0.1.0"
