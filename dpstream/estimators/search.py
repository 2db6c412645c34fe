"""Private hyperparameter selection: ``DPSearchCV``, a search whose whole guarantee is stated and charged.

``GridSearchCV`` over a DP estimator charges every fit on the same rows (``dpstream.PrivacyBudget``
counts them): k candidates and 5 folds cost √(5k + 1) times one fit's μ. ``DPSearchCV`` spends a fixed
share instead, by parallel composition over disjoint shards (the "disjoint shards, a private score on
held-out rows" selection):

1. The rows are split, by a permutation drawn from the search's key (independent of the data), into 2K
   disjoint shards for K candidates: candidate k is trained on shard 2k and scored on shard 2k + 1.
2. Candidate k's fit is μ_s-GDP on its training shard (the estimator's own guarantee, at ε(μ_s)); its
   score is one Gaussian release on its scoring shard at μ_s: the number of rows it classifies right
   (sensitivity 1), or minus the sum of squared errors with predictions and labels clipped into
   ``score_bounds`` = [lo, hi] (sensitivity (hi − lo)²: one row's term lies in [0, (hi − lo)²]).
3. Every row lies in one shard and feeds one mechanism, so the selection is μ_s-GDP (parallel
   composition: ``DisjointUnionEvent``); the best noisy score per row picks the candidate
   (post-processing).
4. The chosen candidate is refitted on all rows at μ_r. The whole search is sqrt(μ_s² + μ_r²)-GDP, with
   μ_s² = ``selection_share``·μ² and μ_r² the rest: exactly the requested (ε, δ).

Each candidate sees N/2K rows, so the selection is coarse; it pays where candidates differ by more than
that noise (an algorithm, public bounds, a step size far off). Measured against the defaults at equal
total ε in BENCHMARKS.md ("Private model selection", ``python -m benchmarks.private_search``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone, is_regressor
from sklearn.model_selection import ParameterGrid
from sklearn.utils.validation import check_is_fitted

from dpstream.estimators.accounting import FitAccounting
from dpstream.estimators.base import SinglePassEstimator
from dpstream.noise import NoiseKey, gaussian
from dpstream.privacy import (
    DisjointUnionEvent,
    GaussianEvent,
    NeighbouringRelation,
    epsilon_for_delta,
    mu_for_epsilon_delta,
)
from dpstream.privacy.budget import PrivacyBudget

__all__ = ["DPSearchCV"]

SCORE_STREAM = "search-score"
SEARCH_OWNS = frozenset({"epsilon", "delta", "noise_key", "budget"})  # set per candidate by the search


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One candidate's outcome: its parameters, its noisy score per scoring row (a DP value), or the
    reason its fit was refused (then it is not chosen)."""

    params: dict[str, Any]
    score: float | None
    events: tuple[Any, ...]  # its fit's (or, refused, at most that) and its score's: μ_s-GDP each
    refused: str | None = None


class DPSearchCV(MetaEstimatorMixin, FitAccounting, BaseEstimator):
    """Choose ``estimator``'s hyperparameters from ``param_grid`` privately and refit the choice, all
    within (``epsilon``, ``delta``) (module docstring). ``best_params_``, ``best_estimator_``,
    ``candidates_`` (the noisy scores) and ``privacy_report_`` after ``fit``."""

    def __init__(
        self,
        estimator: Any,
        param_grid: dict[str, list] | list[dict[str, list]],
        *,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        selection_share: float = 0.25,
        score_bounds: tuple[float, float] | None = None,
        noise_key: NoiseKey | None = None,
        budget: PrivacyBudget | None = None,
    ):
        self.estimator = estimator
        self.param_grid = param_grid
        self.epsilon = epsilon
        self.delta = delta
        self.selection_share = selection_share
        self.score_bounds = score_bounds
        self.noise_key = noise_key
        self.budget = budget

    def fit(self, X: Any, y: Any) -> DPSearchCV:
        candidates, bounds = self._validated()
        X, y = np.asarray(X), np.asarray(y)
        rows = X.shape[0]
        if rows < 4 * len(candidates):
            raise ValueError(
                f"{len(candidates)} candidates need at least {4 * len(candidates)} rows, got {rows}"
            )
        mu = mu_for_epsilon_delta(self.epsilon, self.delta)
        budget = self._budget()
        if budget is not None:  # the whole search, before anything is released
            budget.charge(mu, f"DPSearchCV.fit(epsilon={self.epsilon:g})", self._relation().value, False)
        key = self._fit_key()
        selection_mu, refit_mu = (
            math.sqrt(self.selection_share) * mu,
            math.sqrt(1 - self.selection_share) * mu,
        )
        shards = np.array_split(
            np.random.default_rng(key.philox_key(0, "search-shards")).permutation(rows), 2 * len(candidates)
        )
        outcomes = [
            self._candidate(
                index, params, X, y, shards[2 * index], shards[2 * index + 1], selection_mu, key, bounds
            )
            for index, params in enumerate(candidates)
        ]
        scored = [c for c in outcomes if c.score is not None]
        if not scored:
            raise ValueError(f"every candidate's fit was refused; the first said: {outcomes[0].refused}")
        self.candidates_ = outcomes
        self.best_params_ = max(scored, key=lambda c: c.score).params
        refit = self._configured(self.best_params_, refit_mu, key.derive("refit"))
        self.best_estimator_ = refit.fit(X, y)
        self.privacy_report_ = self._report(refit.privacy_report_, selection_mu, outcomes)
        return self

    def _validated(self) -> tuple[list[dict[str, Any]], tuple[float, float] | None]:
        if not isinstance(self.estimator, SinglePassEstimator):
            raise ValueError(
                f"DPSearchCV takes a dpstream estimator (DPLinearRegression, DPLogisticRegression, DPKANClassifier), "
                f"got {type(self.estimator).__name__}: it sets the estimator's epsilon, noise key and budget"
            )
        candidates = list(ParameterGrid(self.param_grid))
        if not candidates:
            raise ValueError("param_grid holds no candidate")
        owned = sorted({name for candidate in candidates for name in candidate} & SEARCH_OWNS)
        if owned:
            raise ValueError(
                f"param_grid sets {', '.join(owned)}, which the search sets itself (each candidate's budget is "
                "its share of the search's epsilon and delta): remove them, and give DPSearchCV(epsilon=...)"
            )
        if not 0 < self.selection_share < 1:
            raise ValueError(f"selection_share must lie in (0, 1), got {self.selection_share!r}")
        bounds = self.score_bounds
        if is_regressor(self.estimator) and bounds is None:
            given = getattr(self.estimator, "label_bounds", None)
            if not isinstance(given, (tuple, list)):
                raise ValueError(
                    "a regression's score needs public label bounds to clip into (its sensitivity): pass "
                    "score_bounds=(low, high) from public knowledge, or give the estimator label_bounds"
                )
            bounds = (float(given[0]), float(given[1]))
        return candidates, bounds

    def _relation(self) -> NeighbouringRelation:
        return NeighbouringRelation.parse(getattr(self.estimator, "relation", "replace-one"))

    def _configured(self, params: dict[str, Any], mu: float, key: NoiseKey) -> Any:
        """A clone of ``estimator`` with ``params`` at ε(μ), its own key and no budget (the search charges)."""
        epsilon = epsilon_for_delta(self.delta, mu)
        return clone(self.estimator).set_params(
            **params, epsilon=epsilon, delta=self.delta, noise_key=key, budget=None
        )

    def _candidate(self, index, params, X, y, train, held, mu, key, bounds) -> Candidate:
        """Fit candidate ``index`` on its training shard and release its score on its scoring shard."""
        model = self._configured(params, mu, key.derive(f"candidate-{index}"))
        try:
            model.fit(X[train], y[train])
        except ValueError as error:  # a refusal from public settings, or of too few rows for its bounds
            # what it released before refusing (private bounds) is at most its μ_s, on its shard
            return Candidate(
                params, None, (GaussianEvent(1.0, 1.0 / mu, self._relation(), "refused"),), str(error)
            )
        total, sensitivity = self._score_sum(model, X[held], y[held], bounds)
        std = sensitivity / mu
        noisy = total + std * float(gaussian(key, index, SCORE_STREAM, 1)[0])
        score = GaussianEvent(sensitivity, std, self._relation(), f"candidate {index}'s score")
        return Candidate(params, noisy / len(held), (model.privacy_report_.event, score))

    def _score_sum(self, model: Any, X: np.ndarray, y: np.ndarray, bounds) -> tuple[float, float]:
        """(the score's sum over the rows, its sensitivity): rows classified right (1), or minus the
        squared errors clipped into ``bounds`` ((hi − lo)²)."""
        if bounds is None:
            return float(np.sum(model.predict(X) == y)), 1.0
        low, high = bounds
        errors = np.clip(model.predict(X), low, high) - np.clip(y.astype(np.float64), low, high)
        return -float(errors @ errors), (high - low) ** 2

    def _report(self, refit: Any, selection_mu: float, outcomes: list[Candidate]) -> Any:
        """The refit's report composed with the selection (μ_s-GDP by parallel composition)."""
        parts = tuple(event for outcome in outcomes for event in outcome.events)
        refused = sum(c.refused is not None for c in outcomes)
        note = (
            f"selection over {len(outcomes)} candidates on 2 × {len(outcomes)} disjoint shards (parallel composition: "
            f"{selection_mu:.4g}-GDP, {self.selection_share:.0%} of μ²), then the refit of {self.best_params_}"
            + (f"; {refused} candidate(s) refused" if refused else "")
        )
        return refit.composed_with(DisjointUnionEvent(parts), note, self.delta)

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.predict(X)

    def score(self, X: Any, y: Any) -> float:
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.score(X, y)
