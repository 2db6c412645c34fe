"""GLM losses for the statistics kernels, declared once (``dpstream.models.losses.base``): the squared
loss and the logistic loss. A new loss is one module in this package that registers its
``LossDeclaration``, plus its import below."""

from dpstream.models.losses import logistic, squared  # noqa: F401  (each registers its loss)
