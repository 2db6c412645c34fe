"""``PrivacyBudget``: one budget shared by many fits, clones, searches and ``with`` blocks; exact
Gaussian-DP composition; refusal before any release; no silent copies across processes."""

from __future__ import annotations

import math
import pickle
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline

from dpstream import BudgetError, DPKANClassifier, DPLinearRegression, DPLogisticRegression, PrivacyBudget
from dpstream.privacy import GdpAccountant, compose_mu, epsilon_for_delta, mu_for_epsilon_delta

BOUNDS = dict(feature_bounds=(-4.0, 4.0), label_bounds=(-12.0, 12.0))


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((6_000, 3))
    return X, X @ np.array([1.0, 2.0, -1.0]) + rng.standard_normal(6_000)


def fit(estimator, X, y, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return estimator.fit(X, y, **kwargs)


def test_fits_compose_exactly_and_the_one_past_the_total_is_refused_before_any_release(data):
    X, y = data
    budget = PrivacyBudget(epsilon=2.0)
    one = mu_for_epsilon_delta(1.0, 1e-6)
    allowed = math.floor((budget.mu / one) ** 2)  # Gaussian DP: k fits at μ compose to √k·μ
    for _ in range(allowed):
        model = fit(DPLinearRegression(epsilon=1.0, budget=budget, **BOUNDS), X, y)
    assert budget.spent_mu == pytest.approx(math.sqrt(allowed) * one)
    assert budget.spent_epsilon() == pytest.approx(epsilon_for_delta(1e-6, math.sqrt(allowed) * one))
    assert "charged to PrivacyBudget(epsilon=2" in model.privacy_report_.notes[-1]
    refused = DPLinearRegression(epsilon=1.0, budget=budget, **BOUNDS)
    with pytest.raises(
        BudgetError, match=r"needs epsilon=1 at delta=1e-06.*has epsilon=0\.\d+ left after 3 fit"
    ):
        refused.fit(X, y)
    assert not hasattr(refused, "coef_") and len(budget.charges) == allowed  # nothing released or charged
    smaller = fit(
        DPLinearRegression(epsilon=budget.remaining_epsilon() * 0.999, budget=budget, **BOUNDS), X, y
    )
    assert smaller.coef_ is not None and budget.spent_epsilon() <= 2.0 + 1e-9


def test_the_charges_are_events_an_accountant_composes(data):
    X, y = data
    budget = PrivacyBudget(epsilon=5.0)
    first = fit(DPLinearRegression(epsilon=1.0, budget=budget, **BOUNDS), X, y)
    second = fit(DPLinearRegression(epsilon=2.0, budget=budget, **BOUNDS), X, y)
    accountant = GdpAccountant()
    for model in (first, second):
        accountant.compose(model.privacy_report_.event)
    expected = epsilon_for_delta(1e-6, compose_mu(first.privacy_report_.mu, second.privacy_report_.mu))
    assert accountant.get_epsilon(1e-6) == pytest.approx(expected)
    assert budget.accountant().get_epsilon(1e-6) == pytest.approx(expected)


def test_clones_searches_and_cross_validation_charge_the_one_budget(data):
    X, y = data
    budget = PrivacyBudget(epsilon=4.0)
    estimator = DPLinearRegression(epsilon=0.5, budget=budget, **BOUNDS)
    assert clone(estimator).budget is budget
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cross_val_score(estimator, X, y, cv=3)
        assert len(budget.charges) == 3
        search = GridSearchCV(estimator, {"epsilon": [0.25, 0.5]}, cv=3).fit(X, y)
    assert len(budget.charges) == 3 + 2 * 3 + 1  # every candidate on every fold, and the refit
    assert search.best_estimator_.budget is budget


def test_a_with_block_is_the_budget_of_every_fit_that_names_none(data):
    X, y = data
    labels = (y > 0).astype(int)
    with PrivacyBudget(epsilon=3.0) as budget:
        fit(make_pipeline(DPLogisticRegression(epsilon=0.5, feature_bounds=(-4.0, 4.0))), X, labels)
        fit(DPKANClassifier(epsilon=0.5, feature_low=-4.0, feature_high=4.0, num_hidden=8), X, labels)
    assert len(budget.charges) == 2
    fit(DPLinearRegression(epsilon=0.5, **BOUNDS), X, y)  # outside the block: no budget
    assert len(budget.charges) == 2


def test_a_search_past_the_budget_fails_loudly_and_charges_nothing_more(data):
    X, y = data
    budget = PrivacyBudget(epsilon=1.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError):  # scikit-learn: every fit failed, or the refit is refused
            GridSearchCV(
                DPLinearRegression(epsilon=1.0, budget=budget, **BOUNDS), {"fit_intercept": [True]}, cv=5
            ).fit(X, y)
    assert budget.spent_epsilon() <= 1.5 + 1e-9
    assert any("BudgetError" in str(warning.message) for warning in caught)


def test_a_budget_copied_to_another_process_refuses_to_charge(data):
    X, y = data
    budget = PrivacyBudget(epsilon=3.0)
    model = fit(DPLinearRegression(epsilon=1.0, budget=budget, **BOUNDS), X, y)
    restored = pickle.loads(pickle.dumps(model))  # a saved model, or a joblib worker's copy
    assert restored.predict(X[:2]).shape == (2,)
    with pytest.raises(BudgetError, match="copied into another process"):
        restored.fit(X, y)
    assert len(budget.charges) == 1


def test_a_budget_refuses_another_relation_and_a_person_budget_refuses_rows(data):
    X, y = data
    with pytest.raises(BudgetError, match="do not compose"):
        fit(DPLinearRegression(relation="zero-out", budget=PrivacyBudget(epsilon=2.0), **BOUNDS), X, y)
    people = PrivacyBudget(epsilon=2.0, unit="person")
    with pytest.raises(BudgetError, match="protects rows"):
        fit(DPLinearRegression(budget=people, **BOUNDS), X, y)
    ids = np.repeat(np.arange(2_000), 3)
    fit(DPLinearRegression(budget=people, max_rows_per_user=3, **BOUNDS), X, y, groups=ids)
    assert len(people.charges) == 1
    with pytest.raises(ValueError, match="unit must be"):
        PrivacyBudget(epsilon=1.0, unit="household")
