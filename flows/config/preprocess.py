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
    ocean_proximity = "INLAND"                # a category column's constant: one of its categories

It is what ``dpstream convert`` does to a CSV, without writing a second lake: the table (a Delta or
Iceberg version, a Parquet folder) stays the data the ledger charges, and every row is kept (a missing
value needs a public constant, an unknown category or class is refused), so the rows trained on are the
validated rows. ``lake.features`` and ``lake.label`` name the table's columns; the model's features are
the columns the preprocessing presents (``ConvertSpec.output_columns``, built by
``dpstream.flows.assembly.inputs.preprocessing_spec``), recorded with the preprocessing
in the shuffle's manifest and in model.json, so ``dpstream predict`` prepares a table's new rows alike.
A classifier's label is coded by ``model.classes`` when they are given, else read as 0/1 (or −1/+1).
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["PreprocessConfig"]


class PreprocessConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    bounds: dict[str, list[float]] = Field(default_factory=dict)
    categories: dict[str, list[str | int | bool]] = Field(default_factory=dict)
    impute: dict[str, float | str] = Field(default_factory=dict)
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

    def check_columns(self, features: list[str], label: str, classifies: bool) -> None:
        """Refuse (``ValueError`` naming the key and the fix) a key naming no column of ``features`` or
        ``label``, a label given a category list (a classifier's classes are ``model.classes``), a category
        column given a range, an imputed or scaled classifier label, and a column named like the intercept.
        The data plane checks the rest when the assembly builds the preprocessing
        (``dpstream.flows.assembly.inputs.preprocessing_spec``)."""
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
        self._check_imputed_kinds()
        for key, columns in (("bounds", self.bounds), ("unscaled", self.unscaled)):
            coded = [column for column in columns if column in self.categories]
            if coded:
                raise ValueError(
                    f"preprocess.{key}: {', '.join(map(repr, coded))} is a category column (one-hot, in "
                    "preprocess.categories), not a number; remove it here"
                )
            if label in columns and classifies:
                raise ValueError(
                    f"preprocess.{key}: the label {label!r} of a classifier is a class, not a number; remove it here"
                )
        if label in self.impute:
            raise ValueError(f"preprocess.impute: the label {label!r} is never imputed; remove it here")
        if self.intercept and "intercept" in known:
            raise ValueError(
                "preprocess.intercept: lake.features or lake.label has a column named 'intercept', the name of the "
                "constant feature; set preprocess.intercept = false or rename the column"
            )

    def _check_imputed_kinds(self) -> None:
        """A category column's constant is one of its public categories; a number column's is a number."""
        for column, value in self.impute.items():
            categories = self.categories.get(column)
            if categories is None and isinstance(value, str):
                raise ValueError(
                    f"preprocess.impute: {column} = {value!r} is text, and {column!r} is a number column; give a "
                    f"number, or list {column!r}'s categories in preprocess.categories to impute a category"
                )
            if categories is not None and value not in categories:
                raise ValueError(
                    f"preprocess.impute: {column} = {value!r} is not among the public categories of {column!r}, "
                    f"{categories!r}; impute one of them, or add it to preprocess.categories.{column}"
                )
