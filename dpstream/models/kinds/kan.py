"""``kind = "kan"``: the two-layer B-spline KAN binary classifier (seed 004, ``dpstream.models.kan``),
trained with DP-SGD."""

from __future__ import annotations

from dpstream.models.kan import KANModel
from dpstream.models.kinds import ModelKind, Task, register

KAN = register(
    ModelKind(
        name="kan",
        task=Task.CLASSIFICATION,
        description="B-spline KAN binary classifier",
        settings=(
            "num_hidden",
            "grid_size",
            "activation",
            "feature_low",
            "feature_high",
            "input_map",
            "seed",
        ),
        build_model=lambda backend, num_classes, **settings: KANModel(backend=backend, **settings),
        max_classes=2,
        algorithms=("dpsgd", "auto"),
    )
)
