"""scikit-learn estimators: DP linear and logistic regression (``glm``) and the B-spline KAN classifier
(``kan``), siblings on one single-pass fit (``base.SinglePassEstimator``), with the public-scale handling,
classifier labels and fit warnings they share (``support``).

Each fits in one pass over NumPy, pandas or Dask inputs and builds its algorithm through
``dpstream.algorithms.builder``; ``algorithm="auto"`` (the default) chooses it. ``DPSearchCV``
(``search``) chooses hyperparameters privately, within one stated (ε, δ).
"""

from dpstream.estimators.glm import DPLinearRegression, DPLogisticRegression
from dpstream.estimators.kan import DPKANClassifier, theorem_f12_noise_multiplier
from dpstream.estimators.search import DPSearchCV

__all__ = [
    "DPLinearRegression",
    "DPLogisticRegression",
    "DPKANClassifier",
    "DPSearchCV",
    "theorem_f12_noise_multiplier",
]
