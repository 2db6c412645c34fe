"""``kind = "kan"``: the two-layer B-spline KAN binary classifier (Wang et al., "KANs Trained by DP-SGD
with Correlated Noise", arXiv:2605.12648; ``dpstream.models.kan``), trained with DP-SGD.

Its training defaults (``KAN.training``: λ-correlated noise, clip norm 0.5, step 2.0), with the model's
``input_map="cube"``, were chosen on two real datasets together, California-as-classification and
scikit-learn's breast cancer, at ε ∈ {1, 4} (BENCHMARKS.md, "Defaults on real data"): the cube map beat
the ball map on both, and the smaller clip norm (a nearly normalised step) beat 1.0 on both at the same
η·C. The flows (``[model] kind = "kan"``) and ``DPKANClassifier`` both read them from here.
"""

from __future__ import annotations

from dpstream.models.kan import KANModel
from dpstream.models.kinds.base import ModelKind, Task, TrainingDefaults, register

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
        # The KAN's curvature has no public bound, so no stable step 1/(L·R²): a fixed step instead.
        training=TrainingDefaults(learning_rate=2.0, clip_norm=0.5, noise="lambda"),
        holds_constant=True,  # weights whose margin is constant (``KANModel.constant_margin_params``)
    )
)
