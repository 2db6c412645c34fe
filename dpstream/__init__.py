"""dpstream: single-pass differentially private training over data lakes.

The DP core. It imports neither Dask nor Prefect (see docs/design.md): ``dpstream.privacy`` (exact
accountant, events, calibration, ledger) and ``dpstream.noise`` (replayable noise processes).
The scikit-learn-style estimators are importable from the top level: ``from dpstream import
DPLinearRegression, DPLogisticRegression, DPKANClassifier``, and so is the budget they share:
``dpstream.PrivacyBudget`` (``dpstream.privacy.budget``).
"""

from typing import Any

__version__ = "0.1.0"
__all__ = [
    "DPSearchCV",
    "DPLinearRegression",
    "DPLogisticRegression",
    "DPKANClassifier",
    "PrivacyBudget",
    "BudgetError",
    "__version__",
]


def __getattr__(name: str) -> Any:
    # The estimators pull in scikit-learn: resolved on first use, so `import dpstream.privacy` stays light.
    if name in ("DPLinearRegression", "DPLogisticRegression", "DPKANClassifier", "DPSearchCV"):
        from dpstream import estimators

        return getattr(estimators, name)
    if name in ("PrivacyBudget", "BudgetError"):
        from dpstream.privacy import budget

        return getattr(budget, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
