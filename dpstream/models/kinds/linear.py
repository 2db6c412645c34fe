"""``kind = "linear"``: least-squares regression (``dpstream.models.glm.LinearRegressionModel``)."""

from __future__ import annotations

from dpstream.models.glm import LinearRegressionModel
from dpstream.models.kinds.base import ModelKind, SmallBudgetChoice, Task, TrainingDefaults, register

LINEAR = register(
    ModelKind(
        name="linear",
        task=Task.REGRESSION,
        description="linear regression (squared loss)",
        settings=(),
        build_model=lambda backend, num_classes: LinearRegressionModel(backend=backend),
        holds_constant=True,
        # Over many rows and inputs Accelerated-DP-SRGD's error beats AdaSSP's noisy-XᵀX ridge at small ε,
        # and at every ε measured once the private preconditioner whitens its rows (BENCHMARKS.md "Where
        # auto runs Accelerated-DP-SRGD").
        training=TrainingDefaults(
            small_budget=SmallBudgetChoice(
                "srgd", max_epsilon=1.0, min_rows=20_000, min_inputs=20, any_epsilon_whitened=True
            )
        ),
    )
)
