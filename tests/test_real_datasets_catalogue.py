"""The real-data catalogue (``benchmarks.real_datasets``, ``benchmarks.real_datasets_more``): every set
loads offline with at least its stated rows, finite values mostly inside its documented bounds, panels
with many rows per person and a person-disjoint split; and the ``benchmarks.never_worse`` harness
scores and refuses cells as its docstring says.

Loads that take over 2 s on a shared 2-core machine (the two flights sets, 336,776 rows before
cleaning) are marked slow.
"""

import functools

import numpy as np
import pandas as pd
import pytest

from benchmarks import never_worse
from benchmarks.real_datasets import DATASETS, MORE, load, split, split_groups
from benchmarks.real_datasets_more import LOADERS

# Rows each loader's docstring (or the help page, less the rows with a missing value) states.
STATED_ROWS = {
    "california": 20_640, "diamonds": 53_940, "cps1988": 28_155, "diabetes": 442, "california_200k": 20_640,
    "tv16": 37_591, "churn": 7_032, "breast_cancer": 569, "penguins": 333,
    "flights_delay": 327_346, "movielens": 99_997, "insteval": 73_421, "nlswork": 28_013, "psid7682": 4_165,
    "rwm5yr": 19_609, "doctor_visits": 5_190, "gss_wages": 37_185, "loans": 9_182, "flights_carrier": 327_346,
    "fertility": 254_654, "nass_cds": 26_216, "credit_cards": 30_000,
}  # fmt: skip
SLOW = {"flights_delay", "flights_carrier"}
OUTSIDE_SHARE = 0.05  # "mostly within": at most this share of rows has a value outside its bounds


def _names(names):
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in names]


@functools.cache
def cached(name: str):
    return load(name)


def test_the_catalogue_holds_at_least_fifteen_sets_with_stated_rows():
    assert len(DATASETS) >= 15
    assert set(STATED_ROWS) == set(DATASETS)  # a new set states its rows here
    assert set(MORE) == set(LOADERS) and set(MORE) <= set(DATASETS)
    assert sum(rows >= 20_000 for rows in STATED_ROWS.values()) >= 10  # the targets' N


@pytest.mark.parametrize("name", _names(DATASETS))
def test_each_set_loads_with_its_rows_finite_and_mostly_inside_its_documented_bounds(name):
    dataset = cached(name)
    assert dataset.rows >= STATED_ROWS[name]
    assert dataset.X.shape == (dataset.rows, len(dataset.feature_bounds[0]))
    assert np.isfinite(dataset.X).all()
    low, high = dataset.feature_bounds
    assert (low < high).all()
    outside = ((dataset.X < low) | (dataset.X > high)).any(axis=1).mean()
    assert outside <= OUTSIDE_SHARE, f"{name}: {outside:.2%} of rows outside the documented feature bounds"
    assert dataset.source
    if dataset.task == "regression":
        assert np.isfinite(dataset.y).all()
        y_low, y_high = dataset.label_bounds
        label_outside = np.mean((dataset.y < y_low) | (dataset.y > y_high))
        assert label_outside <= OUTSIDE_SHARE, (
            f"{name}: {label_outside:.2%} of labels outside {y_low, y_high}"
        )
    else:
        assert dataset.label_bounds is None
        assert 2 <= len(np.unique(dataset.y)) <= 16


def test_at_least_three_panels_with_many_rows_per_person_and_a_person_disjoint_split():
    panels = [cached(name) for name in DATASETS if name not in SLOW and cached(name).panel]
    assert len(panels) >= 3
    for dataset in panels:
        counts = pd.Series(dataset.groups).value_counts()
        assert len(dataset.groups) == dataset.rows
        assert counts.mean() >= 3, (dataset.name, counts.mean())
        assert dataset.max_rows_per_person is not None and dataset.max_rows_per_person >= 5
        _, y_train, train_ids, _, y_test, test_ids = split_groups(dataset)
        assert not set(train_ids) & set(test_ids), dataset.name
        assert len(y_train) + len(y_test) == dataset.rows
        assert 0.7 <= len(set(train_ids)) / len(counts) <= 0.85
        assert len(split(dataset)[1]) == len(y_train)  # split: the same rows, four arrays


def test_a_set_without_a_panel_keeps_the_historical_row_split():
    dataset = cached("diabetes")
    order = np.random.default_rng(0).permutation(dataset.rows)
    cut = int(0.8 * dataset.rows)
    X_train, y_train, X_test, y_test = split(dataset)
    assert np.array_equal(X_train, dataset.X[order[:cut]]) and np.array_equal(y_test, dataset.y[order[cut:]])
    assert split_groups(dataset)[2] is None


def test_subsampling_a_panel_keeps_whole_people_within_the_row_cap():
    dataset = cached("psid7682")
    smaller = never_worse.subsample(dataset, max_rows=1_000)
    counts = pd.Series(smaller.groups).value_counts()
    assert 900 <= smaller.rows <= 1_000
    assert (counts == pd.Series(dataset.groups).value_counts()[counts.index]).all()
    assert never_worse.subsample(dataset, max_rows=10_000) is dataset


def test_evaluate_cell_scores_fits_and_records_a_refusal_with_its_reason():
    prepared = never_worse.prepare(cached("psid7682"))
    cell = never_worse.evaluate_cell(prepared, "ssp", "documented", "person", fits=2)
    assert len(cell.scores) == 2 and np.isfinite(cell.scores).all() and not cell.refusals
    assert cell.median() > 0 and prepared.constant > 0 and prepared.nonprivate < prepared.constant
    refused = never_worse.evaluate_cell(prepared, "srgd", "documented", "person", fits=3)
    assert refused.refused and "user-level" in refused.refusals[0]
    assert len(refused.refusals) == 1  # a refusal from public settings is not retried
    table = never_worse.table([cell, refused], ["ssp", "srgd"], regression=True)
    assert "refused: user-level DP |" in table and f"{cell.median() / prepared.constant:.3f}" in table
    with pytest.raises(ValueError, match="not a panel"):
        never_worse.evaluate_cell(cached("diabetes"), "ssp", "documented", "person", fits=1)


def test_misses_names_a_cell_worse_than_the_constant():
    prepared = never_worse.prepare(cached("diabetes"))
    worse = never_worse.Cell(prepared, "ssp", "documented", "row", scores=[1.2 * prepared.constant] * 3)
    better = never_worse.Cell(prepared, "ssp", "private", "row", scores=[0.9 * prepared.constant] * 3)
    lines = never_worse.misses([worse, better])
    assert any("median RMSE 1.200×" in line for line in lines)
    assert any("worst RMSE 1.200×" in line for line in lines)
    assert not any("private" in line for line in lines)
