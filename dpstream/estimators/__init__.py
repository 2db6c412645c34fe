"""scikit-learn estimators: DP linear and logistic regression (``glm``) and the B-spline KAN classifier
(``kan``), siblings on one single-pass fit (``base.SinglePassEstimator``), with the public-scale handling,
classifier labels and fit warnings they share (``support``).

Each fits in one pass over NumPy, pandas or Dask inputs and builds its algorithm through
``dpstream.algorithms.builder``; ``algorithm="auto"`` (the default) chooses it.
"""

from dpstream.estimators.glm import DPLinearRegression, DPLogisticRegression
from dpstream.estimators.kan import DPKANClassifier, theorem_f12_noise_multiplier

__all__ = ["DPLinearRegression", "DPLogisticRegression", "DPKANClassifier", "theorem_f12_noise_multiplier"]
