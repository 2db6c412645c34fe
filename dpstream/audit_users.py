"""Empirical privacy audit at the user level: a canary *person* with k worst-case rows.

The test and the bound are ``dpstream.audit``'s (Clopper–Pearson rates of a threshold test on one half
of the trials, chosen on the other): an honest user-level mechanism keeps the lower bound on ε below the
claim, and a broken one pushes it above. The datasets differ in one user. Background users hold 1–3
rows with last feature zero; the canary user holds k rows x = B·e (B = ``CANARY_SCALE``, far outside
the row-norm bound, so each is clipped to B_x·e) with label −Y (clipped to −B_y). Under replace-one the
neighbour's canary has label +Y; under zero-out its rows are zero. Combined into one contribution
(``dpstream.models.users``: w = B_x/S = 1/k for k rows at the bound) the canary moves Xᵀy along e by
exactly B_x·B_y, the row unit's moment bound, so the two Xᵀy releases differ by the full sensitivity
while XᵀX is the same on both sides under replace-one. For DP-SGD (one step over every user,
``dpstream.models.user_gradients``) the canary's mean gradient at θ = 0 is ±Y·B·e, clipped once to ±C·e:
the two sums differ by 2C (replace-one) or C (zero-out) along e, again the full sensitivity, and the
background users add nothing along e. The statistic is −θ_e of the released model either way.

``combine=False`` audits the bug the combination prevents: the same plan (one user, one row's
sensitivity claimed) over statistics whose k canary rows were each clipped on their own, k times the
sensitivity; the audit must catch it.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from dpstream.audit import CANARY_LABEL, CANARY_SCALE, AuditResult, audit_result
from dpstream.coordinator import InMemoryExecutor, run
from dpstream.models import BatchStats, LinearRegressionModel, StatsRequest
from dpstream.noise import NoiseKey
from dpstream.privacy import NeighbouringRelation

__all__ = ["user_canary_datasets", "audit_user_level"]


def user_canary_datasets(
    num_users: int, rows_per_user: int, num_features: int, relation: NeighbouringRelation, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(X, y with the canary user, X', y' of its neighbour, each row's user code): user 0 is the canary
    with ``rows_per_user`` rows; the others hold 1–3 background rows with x_e = 0 (last feature)."""
    rng = np.random.default_rng(seed)
    counts = np.concatenate([[rows_per_user], rng.integers(1, 4, num_users - 1)])
    users = np.repeat(np.arange(num_users), counts)
    X = np.zeros((users.size, num_features))
    X[:, :-1] = rng.standard_normal((users.size, num_features - 1)) / np.sqrt(num_features - 1)
    y = X[:, :-1] @ np.linspace(-1, 1, num_features - 1) + 0.1 * rng.standard_normal(users.size)
    canary = users == 0
    X[canary] = 0.0
    X[canary, -1] = CANARY_SCALE
    X_out, y_in, y_out = X.copy(), y.copy(), y.copy()
    y_in[canary] = -CANARY_LABEL
    if relation is NeighbouringRelation.REPLACE_ONE:
        y_out[canary] = CANARY_LABEL
    else:
        X_out[canary], y_out[canary] = 0.0, 0.0
    return X, y_in, X_out, y_out, users


class _UncombinedUsers:
    """The statistics of a user-level plan with every row clipped on its own (the bug ``combine=False``
    audits): claims to read users, computes rows."""

    by_user = True

    def __init__(self, model: Any, X: np.ndarray, y: np.ndarray):
        self.model, self.X, self.y = model, X, y

    def compute(self, span: Any, request: StatsRequest) -> BatchStats:
        return self.model.block_stats(self.X, self.y, request)


def _statistic(
    algorithm: Any, X: np.ndarray, y: np.ndarray, users: np.ndarray, key: NoiseKey, combine: bool
) -> float:
    model = LinearRegressionModel()
    executor = (
        InMemoryExecutor(model, [(X, y, users)], by_user=True) if combine else _UncombinedUsers(model, X, y)
    )
    fit = run(
        algorithm,
        executor,
        num_rows=int(users.max()) + 1,  # the plan counts users
        num_params=X.shape[1],
        initial_params=np.zeros(X.shape[1]),
        key=key,
    )
    return -float(fit.params[-1])


def audit_user_level(
    algorithm: Any,
    *,
    rows_per_user: int = 10,
    trials: int = 500,
    num_users: int = 400,
    num_features: int = 4,
    confidence: float = 0.95,
    seed: int = 0,
    combine: bool = True,
) -> AuditResult:
    """Audit a user-level ``algorithm`` (AdaSSP, or DP-SGD with a batch of every user, with
    ``unit=PrivacyUnit.user(...)``; or a ``dpstream.audit.NoiseScaledDown`` of one) with a canary user of
    ``rows_per_user`` worst-case rows."""
    if trials < 20:
        raise ValueError(
            f"trials must be at least 20 (half select the threshold, half measure), got {trials!r}"
        )
    unit = getattr(algorithm, "unit", None)
    if unit is None or not unit.is_user:
        raise ValueError("audit_user_level audits a user-level algorithm: give it unit=PrivacyUnit.user(...)")
    relation = NeighbouringRelation.parse(algorithm.relation)
    X, y_in, X_out, y_out, users = user_canary_datasets(
        num_users, rows_per_user, num_features, relation, seed
    )

    def key(label: str, trial: int) -> NoiseKey:
        digest = hashlib.blake2b(f"audit-users/{seed}/{label}/{trial}".encode(), digest_size=32).digest()
        return NoiseKey.from_secret(digest)

    with_canary = np.array(
        [_statistic(algorithm, X, y_in, users, key("in", t), combine) for t in range(trials)]
    )
    without = np.array(
        [_statistic(algorithm, X_out, y_out, users, key("out", t), combine) for t in range(trials)]
    )
    plan = algorithm.plan(num_users, num_features)
    mechanism = f"{algorithm.report(plan).mechanism}, per user (k = {rows_per_user})"
    return audit_result(algorithm, mechanism, with_canary, without, confidence)
