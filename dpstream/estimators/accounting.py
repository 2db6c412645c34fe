"""``FitAccounting``: what a fit owes the privacy ledger around its release: the ``PrivacyBudget`` it
charges (``budget=`` or an enclosing ``with budget:``), its noise key (fresh from OS entropy, given as
``noise_key``, or reproduced from ``random_state`` for tests), and the notes ``privacy_report_`` carries
about them and about non-private pipeline steps before it (``dpstream.estimators.leaks``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from dpstream.estimators.leaks import PipelineCheck, seeded_noise_key
from dpstream.noise import NoiseKey
from dpstream.privacy.budget import PrivacyBudget, active_budget

__all__ = ["FitAccounting", "refuse_fit_params"]


def refuse_fit_params(estimator: str, fit_params: dict[str, Any]) -> None:
    """Refuse ``sample_weight`` naming why (the noise is calibrated to every row counting once), and any
    other keyword as Python would."""
    unknown = sorted(set(fit_params) - {"sample_weight"})
    if unknown:
        raise TypeError(f"{estimator}.fit() got an unexpected keyword argument {unknown[0]!r}")
    if fit_params.get("sample_weight") is not None:
        raise ValueError(
            f"{estimator}.fit does not take sample_weight: every mechanism is calibrated to each row counting "
            "once (a weight above 1 would raise a row's influence past that sensitivity) and weighted "
            "statistics are not implemented. Fit with sample_weight=None; a weight that carries signal can be "
            "passed as a feature"
        )


class FitAccounting:
    """The budget, noise key and report notes of a fit (module docstring). Expects ``epsilon``,
    ``delta``, ``relation``, ``budget`` and ``noise_key`` parameters, and ``random_state`` where the
    noise may be seeded (``DPSearchCV`` has none)."""

    def _budget(self) -> PrivacyBudget | None:
        """The budget this fit charges: ``budget``, else that of an enclosing ``with budget:``, else none."""
        return self.budget if self.budget is not None else active_budget()

    def _charge_budget(self, mu: float, people: bool) -> None:
        """Charge the fit's whole μ to its budget, if any, before anything is released (``BudgetError``
        refuses the fit, charging nothing)."""
        budget = self._budget()
        if budget is not None:
            what = f"{type(self).__name__}.fit(epsilon={self.epsilon:g}, delta={self.delta:g})"
            budget.charge(mu, what, self.relation, people)

    def _noise_seed(self) -> int | None:
        """The seed the noise is reproduced from: ``random_state`` unless ``noise_key`` is given."""
        return None if self.noise_key is not None else getattr(self, "random_state", None)

    def _fit_key(self) -> NoiseKey:
        """``noise_key``, else one ``random_state`` reproduces (a ``PrivacyLeakWarning``), else a fresh key
        from OS entropy."""
        self._seed_note: tuple[str, ...] = ()
        if self.noise_key is not None:
            return self.noise_key
        seed = self._noise_seed()
        if seed is None:
            return NoiseKey.generate()
        key, note = seeded_noise_key(seed, self)
        self._seed_note = (note,)
        return key

    def _rows_rng(self) -> np.random.Generator | None:
        """Which of a person's rows are kept beyond ``max_rows_per_user``: from ``random_state`` where it
        seeds the noise, else OS entropy (None)."""
        seed = self._noise_seed()
        return None if seed is None else np.random.default_rng(seed)

    def _stated(self, report: Any, pipeline: PipelineCheck) -> Any:
        """``report`` with the notes on the pipeline's steps before it, a seeded key and the budget."""
        notes = pipeline.notes + pipeline.composed_note(report.mu, report.relation, report.delta)
        notes += getattr(self, "_seed_note", ())
        budget = self._budget()
        if budget is not None:
            notes += (
                f"charged to {budget!r}: epsilon={budget.spent_epsilon():.4g} spent of {budget.epsilon:g} after "
                f"{len(budget.charges)} fit(s), exact Gaussian-DP composition",
            )
        return dataclasses.replace(report, notes=report.notes + notes) if notes else report
