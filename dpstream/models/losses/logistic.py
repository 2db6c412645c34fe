"""The logistic loss φ(m, y) = log(1 + e^{−y m}) of binary logistic regression (``LogisticRegressionModel``)
for the statistics kernels, with labels y ∈ {−1, +1}: φ'(m, y) = −y σ(−y m).

Both statements are stable for any margin: on a CPU with z = −y m, φ = z + log1p(e^{−z}) for z > 0 and
log1p(e^{z}) otherwise (no exp of a large positive argument); on a GPU φ = max(z, 0) + log1p(e^{−|z|})
and σ(z) = (1 + tanh(z/2))/2. The GPU kernel reads the lake's labels and maps a label > 0 to +1, anything
else to −1, as the model's ``targets`` does on a CPU."""

from __future__ import annotations

import math

from dpstream.models.losses.base import LossDeclaration, register


def derivative_and_loss(margin: float, label: float) -> tuple[float, float]:
    """(φ'(m, y), φ(m, y)) = (−y σ(−y m), log(1 + e^{−y m})) for y = ±1, stable in m."""
    z = -label * margin
    if z > 0.0:
        decay = math.exp(-z)
        return -label / (1.0 + decay), z + math.log1p(decay)
    growth = math.exp(z)
    return -label * growth / (1.0 + growth), math.log1p(growth)


LOGISTIC = register(
    LossDeclaration(
        name="logistic",
        derivative_and_loss=derivative_and_loss,
        cuda="""
  const double z = -label * margin;
  *loss = fmax(z, 0.0) + log1p(exp(-fabs(z)));
  return -label * 0.5 * (1.0 + tanh(0.5 * z));  // -y expit(-y m)""",
        cuda_label="label > 0 ? 1.0 : -1.0",
    )
)
