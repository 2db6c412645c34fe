"""California housing: CSV → Parquet with public preprocessing, DP linear regression at ε = 1.

Every preprocessing constant below is public knowledge about the census extract, not computed from
the rows (docs/design.md, "What counts as a release"): the State's longitude/latitude box, the documented
top-codes (median age 52, median income 15, house value 500,001) and generous caps on the block-group
counts (a block group typically has 600 to 3,000 people, examples/data/california_housing/README.md).
Values are clipped to those ranges and mapped onto [−1, 1] (the public scale the default algorithm's
row-norm bound assumes); ``total_bedrooms`` is missing in 207 rows
and imputed with the public constant 400; ``ocean_proximity`` is one-hot over its public categories.
"""

from __future__ import annotations

from dpstream.pipelines.preprocessing.spec import ConvertSpec

__all__ = ["SPEC", "LABEL_RANGE"]

LABEL_RANGE = (0.0, 500_001.0)  # dollars; predictions are mapped back with it

SPEC = ConvertSpec(
    columns=(
        "longitude",
        "latitude",
        "housing_median_age",
        "total_rooms",
        "total_bedrooms",
        "population",
        "households",
        "median_income",
    ),
    label="median_house_value",
    missing="impute",
    impute_values={"total_bedrooms": 400.0},
    categorical={"ocean_proximity": ("<1H OCEAN", "INLAND", "ISLAND", "NEAR BAY", "NEAR OCEAN")},
    bounds={
        "longitude": (-124.5, -114.0),
        "latitude": (32.5, 42.0),
        "housing_median_age": (0.0, 52.0),
        "total_rooms": (0.0, 10_000.0),
        "total_bedrooms": (0.0, 2_000.0),
        "population": (0.0, 5_000.0),
        "households": (0.0, 2_000.0),
        "median_income": (0.0, 15.0),
        "median_house_value": LABEL_RANGE,
    },
    rows_per_file=250_000,
    scale_range=(-1.0, 1.0),
)
