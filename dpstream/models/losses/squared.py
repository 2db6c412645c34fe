"""The squared loss φ(m, y) = (m − y)²/2 of least-squares regression (``LinearRegressionModel``) for the
statistics kernels: φ'(m, y) = m − y, the residual."""

from __future__ import annotations

from dpstream.models.losses.base import LossDeclaration, register


def derivative_and_loss(margin: float, label: float) -> tuple[float, float]:
    """(φ'(m, y), φ(m, y)) = (m − y, (m − y)²/2)."""
    residual = margin - label
    return residual, 0.5 * residual * residual


SQUARED = register(
    LossDeclaration(
        name="squared",
        derivative_and_loss=derivative_and_loss,
        cuda="""
  const double residual = margin - label;
  *loss = 0.5 * residual * residual;
  return residual;""",
    )
)
