"""``SinglePassEstimator``: the fit every dpstream estimator shares (``DPLinearRegression``,
``DPLogisticRegression`` in ``dpstream.estimators.glm``, ``DPKANClassifier`` in
``dpstream.estimators.kan``, siblings on this base).

A fit validates its input, reads the rows in blocks of ``block_rows`` (NumPy, pandas or a Dask
collection's partitions, one pass), maps them onto the public scale with public or private bounds
(``PublicScale``), draws a fresh noise key from OS entropy unless ``noise_key`` is given, builds the
algorithm the estimator asks for (``dpstream.algorithms.builder``) and runs its one plan
(``dpstream.coordinator.run`` builds the ``RunPlan`` once), then states ``privacy_report_`` and warns
when the fit did not learn (``FitWarnings``).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterator
from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, is_regressor
from sklearn.utils.validation import validate_data

from dpstream.algorithms.builder import (
    HYPERPARAMETERS,
    AlgorithmSpec,
    build_algorithm,
    chosen_algorithm,
    default_learning_rate,
)
from dpstream.algorithms.user_level import check_user_level
from dpstream.backend import BACKENDS
from dpstream.coordinator import InMemoryExecutor, run
from dpstream.estimators.accounting import FitAccounting, refuse_fit_params
from dpstream.estimators.guarding import GuardedRelease
from dpstream.estimators.leaks import pipeline_leaks
from dpstream.estimators.parameters import Interval, Options, check_parameters
from dpstream.estimators.preconditioning import Preconditioned
from dpstream.estimators.support import (
    FitWarnings,
    PublicScale,
    as_2d_float,
    check_finite,
    dask_partitions,
    is_dask,
    is_number,
)
from dpstream.models import Model, ModelKind
from dpstream.models.users import bound_contributions
from dpstream.noise import NoiseKey, dpsgd_noise_names
from dpstream.person_ids import people_of
from dpstream.preconditioner import PRECONDITIONER_SHARE
from dpstream.privacy import PrivacyUnit, epsilon_for_delta, mu_for_epsilon_delta
from dpstream.privacy.budget import PrivacyBudget
from dpstream.validation import check_budget

__all__ = ["SinglePassEstimator", "BLOCK_ROWS"]


def _block_cuts(num_rows: int, block_rows: int, users: np.ndarray | None) -> list[tuple[int, int]]:
    """[start, stop) of each block: every ``block_rows`` rows, or with ``users`` (non-decreasing codes) at
    the first user boundary at or after that, so no user spans two blocks."""
    cuts, start = [], 0
    while start < num_rows:
        stop = min(start + block_rows, num_rows)
        if users is not None and stop < num_rows:
            stop = int(np.searchsorted(users, users[stop - 1], side="right"))  # the end of that user's rows
        cuts.append((start, stop))
        start = stop
    return cuts


BLOCK_ROWS = 65536  # rows per block of the single pass (the ``block_rows`` default)


class SinglePassEstimator(
    PublicScale, FitWarnings, GuardedRelease, Preconditioned, FitAccounting, BaseEstimator
):
    """The fit every dpstream estimator shares: input checks, blocks of ``block_rows``, public or private
    bounds, the noise key, one run of the algorithm over the rows, the fit's warnings and
    ``privacy_report_``. Each estimator states its own parameters and defaults (``__init__``), the model it
    trains (``_fit_model``), the algorithm it asks for (``_algorithm_request``), its targets
    (``_check_targets``, ``_prepare_classes``, ``_prepare_targets``: ``ClassifierLabels`` for a
    classifier) and its fitted attributes (``_store``, ``_decision``)."""

    _kind: ClassVar[ModelKind]  # the model kind it trains (``dpstream.models.kinds``)
    _parameter_constraints: dict = {  # the parameters every estimator has; each adds its own
        "epsilon": [Interval(Real, 0, None, closed="neither")],
        "delta": [Interval(Real, 0, 1, closed="neither")],
        "noise": [Options(set(dpsgd_noise_names()))],
        "correlation": [Interval(Real, 0, 1, closed="left")],
        "nu": [Interval(Real, 0, 1, closed="right")],
        "clip_norm": [Interval(Real, 0, None, closed="neither")],
        "batch_size": [Interval(Integral, 1, None, closed="left"), None],
        "learning_rate": [Interval(Real, 0, None, closed="neither"), None],
        "projection_radius": [Interval(Real, 0, None, closed="neither"), None],
        "relation": [Options({"replace-one", "zero-out"})],
        "noise_key": [NoiseKey, None],
        "random_state": [Interval(Integral, 0, None, closed="left"), None],
        "budget": [PrivacyBudget, None],
        "block_rows": [Interval(Integral, 1, None, closed="left")],
        "max_rows_per_user": [Interval(Integral, 1, None, closed="left"), None],
        "backend": [Options(set(BACKENDS))],
    }

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = True  # fresh DP noise on every fit
        return tags

    # What each estimator states.

    def _fit_model(self) -> Model:
        """The model this fit trains (after ``_prepare_classes``)."""
        raise NotImplementedError(f"{type(self).__name__} must state the model it trains")

    def _algorithm_request(self, model: Model, dim: int) -> dict[str, Any]:
        """The ``AlgorithmSpec`` fields of the algorithm it trains with, besides the budget."""
        raise NotImplementedError(f"{type(self).__name__} must state the algorithm it asks for")

    def _check_targets(self, y: np.ndarray) -> None:
        """Check an in-memory ``y`` before the pass."""
        raise NotImplementedError(f"{type(self).__name__} must state its targets")

    def _prepare_classes(self, y: Any) -> None:
        """Read what the labels define before the pass (a classifier's ``classes_``)."""

    def _prepare_targets(self, y: np.ndarray, offset: int) -> np.ndarray:
        """A block's labels as the model's float64 targets (``offset``: its first row, for errors)."""
        raise NotImplementedError(f"{type(self).__name__} must state its targets")

    def _store(self, params: np.ndarray) -> None:
        """Set the fitted attributes from the released parameters."""
        raise NotImplementedError(f"{type(self).__name__} must state its fitted attributes")

    def _describe(self, report: Any, num_rows: int) -> Any:
        """The fitted ``privacy_report_`` (an estimator may add notes)."""
        return report

    def _model_inputs(self) -> int:
        """The model's inputs per row: the features (a GLM adds its intercept column)."""
        return self.n_features_in_

    # The shared fit.

    def _stable_learning_rate(self) -> float:
        model = self._trained_model
        return default_learning_rate(model, model.num_params(self._model_inputs()), self._row_curvature())

    def _given_hyperparameters(self) -> frozenset[str]:
        """The hyperparameters set to other than their default: the builder refuses those the chosen
        algorithm ignores. The defaults are the signature's, as scikit-learn reads them (the signatures
        take them from ``AlgorithmSpec`` and the kinds' ``TrainingDefaults``)."""
        signature = inspect.signature(type(self).__init__).parameters
        return frozenset(
            name for name in self._known_hyperparameters() if getattr(self, name) != signature[name].default
        )

    def _known_hyperparameters(self) -> frozenset[str]:
        return frozenset(self.get_params()) & HYPERPARAMETERS

    def _refuse_user_level(self, X: Any, y: Any, num_rows: int) -> None:
        """What user-level DP cannot train yet, refused from public settings before any release: another
        backend than NumPy, and an algorithm or model that cannot combine a person's rows
        (``dpstream.algorithms.user_level.check_user_level``)."""
        if self.backend != "numpy":
            raise ValueError(
                f"groups (user-level DP) computes its statistics on the NumPy backend; got backend={self.backend!r}"
            )
        self._prepare_classes(y)  # the model's class count decides its size, hence the algorithm
        model = self._fit_model()
        self._build_algorithm(model, num_rows, model.num_params(self._model_inputs()), self.epsilon)
        check_user_level(self.algorithm_, model)

    def _bound_users(
        self, X: Any, y: Any, groups: Any, num_rows: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, PrivacyUnit]:
        """(X, y listed user by user with at most k rows each, each row's user code, the number of users
        U, the user unit). Under the user unit the plan counts users: U is its public size."""
        if is_dask(X):
            raise ValueError(
                "groups (user-level DP) takes in-memory X and y (NumPy or pandas); compute the Dask collection first"
            )
        ids = np.asarray(groups.to_numpy() if hasattr(groups, "to_numpy") else groups)
        if ids.ndim != 1 or ids.shape[0] != num_rows:
            raise ValueError(
                f"groups must hold one id per row of X ({num_rows:,}), got shape {ids.shape}; pass the user "
                "(customer, patient, device) column"
            )
        # Text ids name people as the lake's shuffle does: "HEAVY", " heavy" and "HEAVY\u200b" are one.
        bounded = bound_contributions(people_of(ids), self.max_rows_per_user, self._rows_rng())
        unit = PrivacyUnit.user("groups", self.max_rows_per_user, self.relation)
        return X[bounded.rows], np.asarray(y)[bounded.rows], bounded.users, bounded.num_users, unit

    def _algorithm_spec(
        self, model: Model, dim: int, epsilon: float, unit: PrivacyUnit | None
    ) -> AlgorithmSpec:
        return AlgorithmSpec(
            epsilon=epsilon,
            delta=self.delta,
            relation=self.relation,
            unit=unit,
            auto_epsilon=self.epsilon,  # "auto" decides by the fit's whole budget, before any share
            small_budget_eligible=self._private_scale(),
            whitens=self._preconditions(),
            row_curvature=self._row_curvature(),
            given=self._given_hyperparameters(),
            known=self._known_hyperparameters(),
            **self._algorithm_request(model, dim),
        )

    def _build_algorithm(
        self, model: Model, num_rows: int, dim: int, epsilon: float, unit: PrivacyUnit | None = None
    ) -> Any:
        spec = self._algorithm_spec(model, dim, epsilon, unit)
        self.algorithm_, algorithm = build_algorithm(spec, model, num_rows, dim)
        return algorithm

    def _algorithm_name(self, model: Model, dim: int, unit: PrivacyUnit | None, num_rows: int) -> str:
        """The algorithm the fit will run, by public settings only (nothing is built)."""
        return chosen_algorithm(self._algorithm_spec(model, dim, self.epsilon, unit), model, dim, num_rows)

    def _raw_blocks(
        self, X: Any, y: Any, users: np.ndarray | None = None
    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
        """(rows, labels, their user codes or None) in blocks of ``block_rows`` (a Dask collection's
        partitions), checked, before scaling; with ``users`` (rows listed user by user) a block ends at a
        user's last row, so every user's rows are in one block."""
        offset = 0
        if is_dask(X):
            X_parts, y_parts = list(dask_partitions(X)), list(dask_partitions(y))
            user_parts: Any = [None] * len(X_parts)  # groups take in-memory inputs only
        else:
            cuts = _block_cuts(X.shape[0], self.block_rows, users)
            X_parts = (X[a:b] for a, b in cuts)
            y_parts = (y[a:b] for a, b in cuts)
            user_parts = (None if users is None else users[a:b] for a, b in cuts)
        for X_part, y_part, block_users in zip(X_parts, y_parts, user_parts, strict=True):
            block = as_2d_float(X_part.compute() if hasattr(X_part, "compute") else X_part)
            labels = np.asarray(y_part.compute() if hasattr(y_part, "compute") else y_part).ravel()
            check_finite(block, "X", offset)
            labels = self._prepare_targets(labels, offset)
            if block.shape[1] != self.n_features_in_:
                raise ValueError(
                    f"X has {block.shape[1]} features in a block starting at row {offset}, expected {self.n_features_in_}"
                )
            offset += block.shape[0]
            yield block, labels, block_users

    def _model_rows(self, block: np.ndarray) -> np.ndarray:
        """A block on the public scale as the model reads it (a GLM appends its intercept column)."""
        return block

    def _blocks(
        self, X: Any, y: Any, users: np.ndarray | None = None, whiten: bool = True
    ) -> Iterator[tuple[np.ndarray, ...]]:
        """The training pass: each block clipped and mapped with the fit's bounds (``PublicScale``), and
        whitened by the fit's preconditioner unless ``whiten`` is False, with its user codes under the
        user unit."""
        for block, labels, block_users in self._raw_blocks(X, y, users):
            block, labels = self._to_public_scale(block, labels)
            block = self._model_rows(self._precondition(block) if whiten else block)
            yield (block, labels) if users is None else (block, labels, block_users)

    def _validate_input(self, X: Any, y: Any) -> tuple[Any, Any, int]:
        if is_dask(X):
            if len(getattr(X, "shape", ())) == 2 and hasattr(X, "rechunk"):
                X = X.rechunk({1: -1})
                y = y.rechunk((X.chunks[0],)) if hasattr(y, "rechunk") else y
                num_rows = int(X.compute_chunk_sizes().shape[0]) if np.isnan(X.shape[0]) else int(X.shape[0])
            else:
                num_rows = int(len(X))
            self.n_features_in_ = int(X.shape[1])
            return X, y, num_rows
        early = np.asarray(y.to_numpy() if hasattr(y, "to_numpy") else y) if y is not None else None
        if is_regressor(self) and early is not None and early.dtype.kind in "fiu":
            check_finite(early.astype(np.float64).reshape(early.shape[0], -1), "y", 0)  # names the row
        if is_regressor(self) and early is not None and early.dtype.kind in "OUS":
            try:
                early.astype(np.float64)
            except (TypeError, ValueError):
                sample = next(value for value in early.ravel() if not is_number(value))
                raise ValueError(
                    f"y must be numeric for a regressor; it holds {str(sample)!r}. For class labels use "
                    "DPLogisticRegression; for numbers stored as text convert y with pandas.to_numeric"
                ) from None
        X, y = validate_data(
            self,
            X,
            y,
            dtype=[np.float64, np.float32],  # float32 stays float32: no copy
            ensure_all_finite=False,  # checked below, with the offending row named
            y_numeric=is_regressor(self),
        )
        check_finite(X, "X", 0)
        self._check_targets(y)
        return X, y, X.shape[0]

    def fit(self, X: Any, y: Any, groups: Any = None, **fit_params: Any) -> SinglePassEstimator:
        """Fit in one pass. ``groups`` (scikit-learn's convention: one id per row, e.g. a customer) makes
        the privacy unit the user: at most ``max_rows_per_user`` rows per id are kept (chosen uniformly
        at random), each id's rows are combined into one contribution, and the guarantee protects every
        row of one id together (``dpstream.privacy.PrivacyUnit``: AdaSSP, and DP-SGD / DP-AMBSSGD on the
        linear, logistic and KAN models, ``dpstream.algorithms.user_level.check_user_level``). The ids themselves
        are read once and never kept. ``sample_weight`` is refused, naming why (``refuse_fit_params``):
        scikit-learn's ``has_fit_parameter`` sees none, so its tools do not pass weights."""
        refuse_fit_params(type(self).__name__, fit_params)
        check_parameters(self)
        leaks = pipeline_leaks(self)  # named before any release: the steps fitted before this one
        check_budget(self.epsilon, self.delta)  # the whole fit's ε, before private bounds take a share
        X, y, num_rows = self._validate_input(X, y)
        users, unit = None, None
        # Not the previous fit's: nothing below reads it before this fit's release
        self.preconditioner_ = None
        if groups is None and self.max_rows_per_user is not None:
            raise ValueError(
                "max_rows_per_user bounds a person's rows: pass groups=ids to fit (user-level DP), or leave "
                "it None for row-level DP"
            )
        self._parse_bounds()
        if groups is not None:
            self._refuse_user_level(X, y, num_rows)  # before any row is read for the release
            X, y, users, num_rows, unit = self._bound_users(X, y, groups, num_rows)
        key = self._fit_key()
        self._prepare_classes(y)
        mu = mu_for_epsilon_delta(self.epsilon, self.delta)
        self._charge_budget(mu, people=users is not None)  # before the first release, or refused
        bounds = self._private_bounds(
            lambda: self._raw_blocks(X, y, users), num_rows, key, mu, people=users is not None
        )
        # Private bounds, the preconditioner and the release guard take shares of μ²; training gets the
        # rest, so the four compose to (ε, δ).
        inputs = self._model_inputs()
        model = self._trained_model = self._fit_model()
        dim = model.num_params(inputs)
        guard_share = self._guard_share(model, dim, unit, num_rows)
        spread = self._whitening_spread(model, dim, unit, num_rows, mu)
        whitening_share = PRECONDITIONER_SHARE if spread else 0.0
        share = guard_share + whitening_share + (0.0 if bounds is None else bounds.share)
        epsilon = epsilon_for_delta(self.delta, math.sqrt(1 - share) * mu)
        self._training_epsilon = epsilon  # the ε training was calibrated to, after any private bounds
        if spread:  # the algorithm's refusals from public settings (e.g. too few rows) before the release
            self._build_algorithm(model, num_rows, dim, epsilon, unit)
        pre_mu = math.sqrt(whitening_share) * mu
        self._release_preconditioner(spread, pre_mu, self._blocks(X, y, users), num_rows, key)
        algorithm = self._build_algorithm(model, num_rows, dim, epsilon, unit)
        guard = self._release_guard(math.sqrt(guard_share) * mu)
        constant = guard and self._guard_constant(guard, self._blocks(X, y, users), num_rows, key)
        result = run(
            algorithm,
            InMemoryExecutor(model, self._blocks(X, y, users), by_user=users is not None),
            num_rows=num_rows,
            num_params=dim,
            initial_params=self._start_at(model.init_params(inputs), constant),
            key=key,
        )
        report = result.report if bounds is None else bounds.combine(result.report, self.delta)
        report = self._preconditioned_report(report, self.delta)
        # The guard judges the model as published: linear on the public scale, whitening mapped back
        params, blocks = self._unwhitened(result.params), self._blocks(X, y, users, whiten=False)
        report = self._guarded_release(model, params, blocks, guard, constant, num_rows, key, report)
        if getattr(result.state, "label_mean_only", False):  # AdaSSP's λ₀ > N rule released the noisy mean
            self.released_ = "constant"
        self.privacy_report_ = self._stated(self._describe(report, num_rows), leaks)
        self.training_loss_ = np.asarray(result.training_loss)  # non-private: operator only
        self.n_steps_ = len(result.training_loss)
        self.ridge_ = getattr(result.state, "ridge", None)  # AdaSSP's λ, a DP output
        self._warn_if_clipped()
        del self._outside_public  # exact counts of the rows (and of clipped values): not kept on the model
        self._warn_if_label_mean_only(result.state)
        self._warn_if_ridge_dominates(getattr(result.state, "curvature", None))
        self._warn_if_diverging()
        self._warn_if_constant_released(result.state)
        self._warn_if_one_class(X)
        return self
