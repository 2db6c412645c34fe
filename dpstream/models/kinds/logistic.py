"""``kind = "logistic"``: logistic regression over two classes (one margin per row,
``LogisticRegressionModel``) or K ≥ 3 (softmax, ``MultinomialLogisticModel``), from the public class list."""

from __future__ import annotations

from dpstream.models.glm import LogisticRegressionModel
from dpstream.models.kinds.base import ModelKind, Task, register
from dpstream.models.multinomial import MultinomialLogisticModel


def _build(backend: str, num_classes: int):
    if num_classes == 2:
        return LogisticRegressionModel(backend=backend)
    return MultinomialLogisticModel(num_classes=num_classes, backend=backend)


LOGISTIC = register(
    ModelKind(
        name="logistic",
        task=Task.CLASSIFICATION,
        description="logistic regression (two classes, or K with the softmax loss)",
        settings=(),
        build_model=_build,
        holds_constant=True,
    )
)
