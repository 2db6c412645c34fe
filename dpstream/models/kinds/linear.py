"""``kind = "linear"``: least-squares regression (``dpstream.models.glm.LinearRegressionModel``)."""

from __future__ import annotations

from dpstream.models.glm import LinearRegressionModel
from dpstream.models.kinds.base import ModelKind, Task, register

LINEAR = register(
    ModelKind(
        name="linear",
        task=Task.REGRESSION,
        description="linear regression (squared loss)",
        settings=(),
        build_model=lambda backend, num_classes: LinearRegressionModel(backend=backend),
        intercept_constant=True,
    )
)
