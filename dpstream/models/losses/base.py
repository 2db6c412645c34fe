"""The declaration of a GLM loss for the statistics kernels (``LossDeclaration``) and the registry of the
declared losses.

A GLM's loss is φ(⟨x, w⟩, y), so every per-example quantity the kernels need comes from one scalar
function of the margin m and the label y: (φ'(m, y), φ(m, y)) (``dpstream.models.glm``). A declaration
states that function twice, once per kernel, and the label the loss reads:

* ``derivative_and_loss``: plain Python that Numba compiles into the CPU kernels
  (``dpstream.models.glm_cpu``), given the labels the model's ``targets`` produced;
* ``cuda``: the CUDA C++ body of ``double derivative_and_loss(double margin, double label, double* loss)``
  (return φ', store φ in ``*loss``) that the GPU kernel's source is built with (``dpstream.models.glm_cuda_source``);
* ``cuda_label``: a CUDA expression in ``label`` for the label the loss reads from the stored one (the GPU
  kernel reads the lake's labels as they are; the logistic loss maps them to ±1 there).

Neither kernel branches on the loss: each is compiled for one declaration. A new loss is one module in
this package that registers its declaration, plus its import in the package, and a GLM whose
``loss_kind`` names it; ``tests/models/test_losses.py`` registers a toy one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dpstream.registry import Registry

__all__ = ["LossDeclaration", "register", "unregister", "declared_loss", "loss_names"]


@dataclass(frozen=True)
class LossDeclaration:
    name: str
    derivative_and_loss: Callable[
        [float, float], tuple[float, float]
    ]  # (m, y) -> (φ'(m, y), φ(m, y)), Numba-compiled
    cuda: str  # CUDA C++ statements: return φ'(margin, label) and store φ in *loss
    cuda_label: str = "label"  # CUDA expression: the label the loss reads, from the stored ``label``


_REGISTRY: Registry[LossDeclaration] = Registry("loss")


def register(declaration: LossDeclaration) -> LossDeclaration:
    """Declare a loss; its name must be new."""
    return _REGISTRY.register(declaration.name, declaration)


unregister = _REGISTRY.unregister
loss_names = _REGISTRY.names  # the declared losses, in declaration order
declared_loss = _REGISTRY.get  # ValueError naming the declared losses for another name
