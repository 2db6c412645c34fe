"""A pipeline config's ``[preprocess]`` section: the public preprocessing of a lake whose columns are in
their own units (dollars, years, category names), applied to each row as the shuffle reads it.

    [preprocess]
    intercept = true                          # a constant feature 1 (the default)
    [preprocess.bounds]                       # public ranges: clipped, then mapped onto [-1, 1]
    median_income = [0, 15]
    median_house_value = [14999, 500001]      # a regression's label too
    [preprocess.categories]                   # public category lists: one-hot columns
    ocean_proximity = ["<1H OCEAN", "INLAND", "ISLAND", "NEAR BAY", "NEAR OCEAN"]
    [preprocess.impute]                       # public constants for missing values
    total_bedrooms = 400

It is what ``dpstream convert`` does to a CSV, without writing a second lake: the table (a Delta or
Iceberg version, a Parquet folder) stays the data the ledger charges, and every row is kept (a missing
value needs a public constant, an unknown category or class is refused), so the rows trained on are the
validated rows. ``lake.features`` and ``lake.label`` name the table's columns; the model's features are
the columns the preprocessing presents (``ConvertSpec.output_columns``), recorded with the preprocessing
in the shuffle's manifest and in model.json, so ``dpstream predict`` prepares a table's new rows alike.
A classifier's label is coded by ``model.classes`` when they are given, else read as 0/1 (or −1/+1).
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.preprocessing.spec import ConvertSpec

__all__ = ["PreprocessConfig"]


class PreprocessConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    bounds: dict[str, list[float]] = Field(default_factory=dict)
    categories: dict[str, list[str | int | bool]] = Field(default_factory=dict)
    impute: dict[str, float] = Field(default_factory=dict)
    unscaled: list[str] = Field(default_factory=list)  # columns already on [-1, 1]: indicators, 0/1
    intercept: bool = True

    @field_validator("bounds")
    @classmethod
    def _ranges(cls, bounds: dict[str, list[float]]) -> dict[str, list[float]]:
        for column, pair in bounds.items():
            if len(pair) != 2 or not all(math.isfinite(value) for value in pair) or pair[0] >= pair[1]:
                raise ValueError(
                    f"{column} = {pair!r}: a public range is [LOW, HIGH], finite, with LOW < HIGH"
                )
        return bounds

    @field_validator("categories")
    @classmethod
    def _lists(cls, categories: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for column, values in categories.items():
            if not values or len(set(values)) != len(values):
                raise ValueError(f"{column}: list its public categories, each once (got {values!r})")
        return categories

    def spec(
        self,
        features: list[str],
        label: str,
        classes: list[str] | None,
        classifies: bool,
    ) -> ConvertSpec:
        """The ``ConvertSpec`` (``on_read``) for a lake whose ``features`` and ``label`` columns this section
        prepares; ``ValueError`` naming the key and the fix for a column without a public scale or a
        key naming no column."""
        known = {*features, label}
        for key, columns in (
            ("bounds", self.bounds),
            ("impute", self.impute),
            ("unscaled", self.unscaled),
            ("categories", self.categories),
        ):
            stray = [column for column in columns if column not in known]
            if stray:
                raise ValueError(
                    f"preprocess.{key} names {', '.join(map(repr, stray))}, which is neither in lake.features nor "
                    "lake.label; fix the name or add the column to lake.features"
                )
        if label in self.categories:
            raise ValueError(
                f"preprocess.categories: the label {label!r} is coded by model.classes (a classifier's public "
                "class list), not one-hot; move its values there"
            )
        for key, columns in (("bounds", self.bounds), ("unscaled", self.unscaled), ("impute", self.impute)):
            coded = [column for column in columns if column in self.categories]
            if coded:
                raise ValueError(
                    f"preprocess.{key}: {', '.join(map(repr, coded))} is a category column (one-hot, in "
                    "preprocess.categories), not a number; remove it here"
                )
            if label in columns and (classifies or key == "impute"):
                raise ValueError(
                    f"preprocess.{key}: the label {label!r} "
                    + ("of a classifier is a class, not a number" if classifies else "is never imputed")
                    + "; remove it here"
                )
        # A classifier's label without public classes is read as 0/1 or −1/+1 (the label contract checks it).
        unscaled = [*self.unscaled, *([label] if classifies and classes is None else [])]
        numeric = tuple(column for column in features if column not in self.categories)
        spec_arguments = dict(
            columns=numeric,
            label=label,
            missing="impute",
            impute_values={column: float(value) for column, value in self.impute.items()},
            categorical={column: tuple(values) for column, values in self.categories.items()},
            bounds={column: (float(low), float(high)) for column, (low, high) in self.bounds.items()},
            scale_range=(-1.0, 1.0),
            unscaled=tuple(dict.fromkeys(unscaled)),
            label_classes=tuple(classes) if classifies and classes is not None else (),
            intercept=self.intercept,
            on_read=True,
        )
        if self.intercept and "intercept" in known:
            raise ValueError(
                "preprocess.intercept: lake.features or lake.label has a column named 'intercept', the name of the "
                "constant feature; set preprocess.intercept = false or rename the column"
            )
        try:
            spec = ConvertSpec(**spec_arguments)
        except LakeError as error:
            raise ValueError(f"preprocess: {error}") from None
        names = [*spec.output_columns(), label]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(
                f"preprocess.categories: the model's columns would repeat {', '.join(map(repr, repeated))} (a one-hot "
                "column is named COLUMN=VALUE): list each category once, as one type, and rename a clashing column"
            )
        missing = spec.unbounded_columns()
        if missing:
            template = ", ".join(f"{column} = [LOW, HIGH]" for column in missing)
            raise ValueError(
                f"preprocess.bounds: no public range for {', '.join(map(repr, missing))}: the algorithms' clip norms and "
                f"steps assume every column on about [-1, 1], and one column in its own units (dollars, years) gives a "
                f"model worse than the mean. Add {template} under [preprocess.bounds] (public ranges: documentation, "
                "domain knowledge, never measured on the data), or list a column already on that scale (an "
                "indicator) in preprocess.unscaled"
            )
        return spec
