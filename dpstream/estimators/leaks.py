"""What a fit can tell about privacy it does not control: steps of a scikit-learn ``Pipeline`` fitted
before it without privacy, and noise made reproducible by ``random_state``.

A ``Pipeline`` fits its steps in order, each on the rows the previous steps transformed. A step that
learns from those rows (``StandardScaler``'s means, ``SimpleImputer``'s medians, ``OneHotEncoder``'s
categories) holds data-dependent values that no accountant saw: the pipeline as a whole is not
(ε, δ)-DP even when its last step is. A dpstream fit finds the ``Pipeline`` it is fitted by (the caller's
frames, public objects only: nothing here reads the rows), and every earlier step that is neither
privately fitted (``PrivatelyFitted``: ``dpstream.preprocessing``) nor data-independent is named in a
``PrivacyLeakWarning`` and in ``privacy_report_.notes``.

Data-independent steps learn nothing from the rows beyond their count of columns: ``"passthrough"``,
``FunctionTransformer``, ``PolynomialFeatures``, ``Normalizer``, ``Binarizer``, ``SimpleImputer`` with
``strategy="constant"``, ``OneHotEncoder`` with its categories listed and no frequency rule, and a
``Pipeline``, ``ColumnTransformer`` or ``FeatureUnion`` made only of such steps.
"""

from __future__ import annotations

import hashlib
import inspect
import warnings
from dataclasses import dataclass
from typing import Any

from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.pipeline import FeatureUnion, Pipeline
from sklearn.preprocessing import (
    Binarizer,
    FunctionTransformer,
    Normalizer,
    OneHotEncoder,
    PolynomialFeatures,
)

from dpstream.noise import NoiseKey
from dpstream.privacy.gdp import compose_mu, epsilon_for_delta

__all__ = [
    "PipelineCheck",
    "PrivacyLeakWarning",
    "data_independent",
    "PrivatelyFitted",
    "pipeline_leaks",
    "seeded_noise_key",
]

_STATELESS = (FunctionTransformer, PolynomialFeatures, Normalizer, Binarizer)
_FRAMES_SEARCHED = 12  # Pipeline.fit calls the last step's fit directly; a few frames of margin


class PrivacyLeakWarning(UserWarning):
    """Something outside the stated (ε, δ) saw the rows: a non-private pipeline step, or noise a seed
    reproduces."""


class PrivatelyFitted:
    """Marks a transformer whose fit releases nothing but through a DP mechanism (or nothing at all)."""


def data_independent(step: Any) -> bool:
    if (
        step is None
        or step == "passthrough"
        or step == "drop"
        or isinstance(step, (PrivatelyFitted, _STATELESS))
    ):
        return True
    if isinstance(step, SimpleImputer):
        return step.strategy == "constant"
    if isinstance(step, OneHotEncoder):
        return (
            not isinstance(step.categories, str)
            and step.min_frequency is None
            and step.max_categories is None
        )
    if isinstance(step, (Pipeline, ColumnTransformer, FeatureUnion)):
        return all(data_independent(part) for _, part in _parts(step))
    return False


def _parts(step: Any) -> list[tuple[str, Any]]:
    """The named parts of a composite step (none for a plain one)."""
    if isinstance(step, Pipeline):
        return list(step.steps)
    if isinstance(step, ColumnTransformer):
        return [(name, inner) for name, inner, _ in step.transformers] + [("remainder", step.remainder)]
    if isinstance(step, FeatureUnion):
        return list(step.transformer_list)
    return []


def _describe(step: Any) -> str:
    """A step's class, and for a composite the parts that learn from the rows: "ColumnTransformer:
    'num' SimpleImputer"."""
    inner = [f"{name!r} {_describe(part)}" for name, part in _parts(step) if not data_independent(part)]
    return type(step).__name__ + (": " + ", ".join(inner) if inner else "")


def _enclosing_pipeline(fitted: Any) -> tuple[Pipeline, int] | None:
    """The ``Pipeline`` whose ``fit`` is fitting ``fitted`` now, and ``fitted``'s position in it."""
    frame = inspect.currentframe()
    try:
        for _ in range(_FRAMES_SEARCHED):
            frame = frame.f_back if frame is not None else None
            if frame is None:
                return None
            caller = frame.f_locals.get("self")
            if isinstance(caller, Pipeline):
                for position, (_, step) in enumerate(caller.steps):
                    if step is fitted:
                        return caller, position
        return None
    finally:
        del frame  # frames hold the rows: no reference cycle past this call


@dataclass(frozen=True)
class PipelineCheck:
    """What a fit learnt of the ``Pipeline`` fitting it: notes on the steps before it fitted without
    privacy (each also a ``PrivacyLeakWarning``), and the μ of each step before it fitted with DP."""

    notes: tuple[str, ...] = ()
    earlier: tuple[tuple[str, float, str], ...] = ()  # (step, its μ, its relation)

    def composed_note(self, mu: float, relation: str, delta: float) -> tuple[str, ...]:
        """The pipeline's total with a fit of ``mu`` under ``relation``: μ² add up (exact Gaussian DP)."""
        spent = [(name, step_mu) for name, step_mu, step_relation in self.earlier if step_mu > 0]
        if not spent:
            return ()
        if any(step_relation != relation for _, step_mu, step_relation in self.earlier if step_mu > 0):
            return ("the Pipeline's earlier DP steps are stated under another relation: they do not compose",)
        total = compose_mu(mu, *(step_mu for _, step_mu in spent))
        steps = ", ".join(f"{name!r} ({step_mu:.4g}-GDP)" for name, step_mu in spent)
        return (
            f"with the Pipeline's earlier DP steps {steps}, the pipeline releases {total:.4g}-GDP in all: "
            f"(epsilon={epsilon_for_delta(delta, total):.4g}, delta={delta:g})-DP",
        )


def pipeline_leaks(fitted: Any) -> PipelineCheck:
    """What ``fitted`` learns of the ``Pipeline`` fitting it (``PipelineCheck``, module docstring)."""
    found = _enclosing_pipeline(fitted)
    if found is None:
        return PipelineCheck()
    pipeline, position = found
    earlier = tuple(
        (name, float(step.privacy_report_.mu), str(step.privacy_report_.relation))
        for name, step in pipeline.steps[:position]
        if isinstance(step, PrivatelyFitted) and hasattr(step, "privacy_report_")
    )
    leaky = [name for name, step in pipeline.steps[:position] if not data_independent(step)]
    if not leaky:
        return PipelineCheck((), earlier)
    names = ", ".join(f"{name!r} ({_describe(dict(pipeline.steps)[name])})" for name in leaky)
    note = (
        f"the Pipeline fitted {names} on the rows without differential privacy before this step: its fitted "
        "values are outside this guarantee, so the pipeline as a whole is not (epsilon, delta)-DP. Use "
        "dpstream.preprocessing's DPStandardScaler, DPSimpleImputer or DPOneHotEncoder, or public constants"
    )
    warnings.warn(note[0].upper() + note[1:], PrivacyLeakWarning, stacklevel=3)
    return PipelineCheck((note,), earlier)


def seeded_noise_key(seed: int, fitted: Any) -> tuple[NoiseKey, str]:
    """The noise key ``random_state=seed`` makes, and the note (also a ``PrivacyLeakWarning``) that says
    what it costs: whoever knows the seed can subtract the noise, so the guarantee holds only against
    those who do not. For tests and examples, never for a release."""
    digest = hashlib.blake2b(str(int(seed)).encode("ascii"), digest_size=32, person=b"dpstream-seed")
    note = (
        f"random_state={int(seed)} made the noise reproducible: for tests only. Whoever knows the seed can "
        "subtract the noise, so the guarantee does not hold against them; leave random_state=None (fresh "
        "noise from OS entropy) for anything released"
    )
    warnings.warn(f"{type(fitted).__name__}: {note}", PrivacyLeakWarning, stacklevel=3)
    return NoiseKey(digest.digest()), note
