"""The public preprocessing of a table's rows: columns selected, missing values imputed or dropped,
categories one-hot encoded, numeric columns clipped to public bounds and mapped onto ``scale_range``,
a class label coded by its position in a public list, a constant intercept column.

``ConvertSpec`` describes it and ``convert_rows`` (``dpstream.pipelines.preprocessing.rows``) applies it to one
batch. Two callers: ``dpstream convert`` writes a CSV's rows converted into a new Parquet lake
(``dpstream.pipelines.conversion.convert``), and a lake read
with ``[preprocess]`` in the config (a Delta or Iceberg table, a Parquet folder in its own units) has its
live rows converted as they are read (``ConvertSpec.for_reading``, ``LakeSpec.present``), so the table
itself stays the data the ledger charges. Nothing here reads a value that is released: every constant is
public (docs/design.md, "What counts as a release").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from dpstream.pipelines.errors import LakeError

if TYPE_CHECKING:
    from dpstream.pipelines.preprocessing.private_bounds import PrivateBoundsRequest

__all__ = ["ConvertSpec", "INTERCEPT_COLUMN", "RAW_LABEL_COLUMN"]

INTERCEPT_COLUMN = "intercept"
# A clipped label's value as the source held it (``ConvertSpec.keeps_raw_label``): written beside the
# prepared label by `dpstream convert` and by the shuffle of a lake read with [preprocess], never read by
# training (not a feature, not the label), read only by the held-out evaluation (non-private, operator
# only: ``dpstream.flows.assembly.evaluation``), which scores the model against the labels as they were.
RAW_LABEL_COLUMN = "__dpstream_raw_label"


@dataclass(frozen=True)
class ConvertSpec:
    columns: tuple[str, ...]  # numeric feature columns to keep, in order
    label: str
    missing: str = "drop"  # "drop" rows with a missing value, or "impute" the public constants below
    impute_values: dict[str, float | str] = field(default_factory=dict)  # a category column's: a category
    categorical: dict[str, tuple[str, ...]] = field(
        default_factory=dict
    )  # column -> public categories (one-hot)
    unknown_category: str = "error"  # "error" or "drop" rows whose category is not in the list
    # column -> public (low, high): values are clipped to the range and mapped onto scale_range (features or label)
    bounds: dict[str, tuple[float, float]] = field(default_factory=dict)
    rows_per_file: int = 250_000
    # [0, 1] keeps the historical layout; (-1, 1), the public scale the algorithms' default bounds and
    # steps assume, spends the row-norm bound on spread instead of on an offset (BENCHMARKS.md, real data)
    scale_range: tuple[float, float] = (0.0, 1.0)
    # Columns kept as they are (already on the public scale: indicators, a {0, 1} class label).
    unscaled: tuple[str, ...] = ()
    # Refuse a numeric column (feature or label) that has neither bounds nor a place in ``unscaled``: the
    # algorithms' clip norms and steps assume the public scale, and one raw column (longitude, dollars)
    # ruins the model without an error. ``dpstream convert`` sets it.
    require_bounds: bool = False
    # Columns whose bounds are estimated privately from a sample of rows left out of the lake
    # (dpstream.pipelines.preprocessing.private_bounds); the record then holds the released bounds and their guarantee.
    private_bounds: PrivateBoundsRequest | None = None
    # A categorical label's public class list: each label is written as its position 0..K−1 (the lake's
    # label contract for a K-class model); another value is refused, or its row dropped with
    # unknown_category="drop". Empty: a numeric label.
    label_classes: tuple[str, ...] = ()
    # Columns copied into the lake untouched (an id): never features, read back by `predict --keep`.
    passthrough: tuple[str, ...] = ()
    # A constant feature INTERCEPT_COLUMN = 1 (public), so a model has an intercept without a one-hot group.
    intercept: bool = False
    # The column naming a person (one of ``passthrough``): private bounds then sample people, not rows
    # (``PrivateBoundsRequest.user_column``), and the written config protects people.
    user_column: str | None = None
    # Applied to a lake's rows as they are read (a pipeline config's [preprocess]), not written by `dpstream
    # convert`: every row is kept (missing values imputed, unknown values refused), so the rows trained on
    # are the validated source's rows, and errors name the config's keys.
    on_read: bool = False

    def __post_init__(self) -> None:
        self._check_policies()
        self._check_column_roles()
        self._check_scale()

    def _check_policies(self) -> None:
        """Refuse policies that contradict each other or the way the spec is applied."""
        if self.on_read and (
            self.missing != "impute" or self.unknown_category != "error" or self.private_bounds is not None
        ):
            raise LakeError(
                "preprocessing applied as rows are read keeps every row: missing='impute', unknown_category='error' "
                "and public bounds only"
            )
        if self.user_column is not None and self.user_column not in self.passthrough:
            raise LakeError(
                f"the person column {self.user_column!r} must be carried into the lake: add it to passthrough (--id)"
            )
        if self.private_bounds is not None and self.private_bounds.user_column != self.user_column:
            raise LakeError(
                "the private bounds sample people of one column and the spec names another "
                f"({self.private_bounds.user_column!r} against {self.user_column!r}): give both the same"
            )
        if self.missing not in ("drop", "impute"):
            raise LakeError(f"missing must be 'drop' or 'impute', got {self.missing!r}")
        if self.missing == "drop" and self.impute_values:
            # Numbers and categories alike: a constant that would be ignored (or applied to one kind only)
            # is refused rather than silently changing which rows are kept.
            raise LakeError(
                f"imputation constants ({', '.join(map(repr, self.impute_values))}) apply only with missing='impute' "
                "(--missing impute); with missing='drop' a row with a missing value is dropped. Set one or the other"
            )
        if self.unknown_category not in ("error", "drop"):
            raise LakeError(f"unknown_category must be 'error' or 'drop', got {self.unknown_category!r}")
        if not self.columns and not self.categorical:
            raise LakeError("select at least one feature column (columns) or categorical column")

    def _check_column_roles(self) -> None:
        """Refuse a column named in a role it cannot take, or in two roles that exclude each other."""
        for column, value in self.impute_values.items():
            categories = self.categorical.get(column)
            if categories is not None and value not in categories:
                raise LakeError(
                    f"the imputation constant {value!r} of category column {column!r} is not among its public "
                    f"categories {list(categories)}; impute one of them"
                )
            if categories is None and isinstance(value, str):
                raise LakeError(
                    f"the imputation constant {value!r} of number column {column!r} must be a number"
                )
        for column, (low, high) in self.bounds.items():
            if column not in self.columns and column != self.label:
                raise LakeError(
                    f"bounds name column {column!r}, which is neither a selected feature column nor the label"
                )
            if not (np.isfinite(low) and np.isfinite(high) and low < high):
                raise LakeError(
                    f"bounds of column {column!r} must be finite with low < high, got ({low!r}, {high!r})"
                )
        for column in self.unscaled:
            if column not in self.columns and column != self.label:
                raise LakeError(
                    f"unscaled names column {column!r}, which is neither a selected feature column nor the label"
                )
            if column in self.bounds:
                raise LakeError(
                    f"column {column!r} has bounds and is also listed as unscaled; keep one of the two"
                )
        for column in self.private_bounds.columns if self.private_bounds else ():
            if column not in self.columns and column != self.label:
                raise LakeError(
                    f"private bounds name column {column!r}, which is neither a selected numeric feature column nor the label"
                )
            if column in self.bounds or column in self.unscaled:
                raise LakeError(
                    f"column {column!r} has public bounds or is unscaled and is also named for private bounds; keep one"
                )
        if self.label_classes and (
            len(set(self.label_classes)) != len(self.label_classes) or len(self.label_classes) < 2
        ):
            raise LakeError(
                f"label classes must be at least 2 distinct names, got {list(self.label_classes)}"
            )
        for column in self.passthrough:
            if column == self.label or column in self.columns or column in self.categorical:
                raise LakeError(
                    f"column {column!r} is both carried through untouched (an id) and used as a feature or the label; keep one"
                )
        if self.intercept and INTERCEPT_COLUMN in (*self.columns, self.label, *self.passthrough):
            raise LakeError(
                f"the CSV already has a column {INTERCEPT_COLUMN!r}; rename it or leave out the intercept"
            )
        if RAW_LABEL_COLUMN in (*self.columns, self.label, *self.passthrough, *self.categorical):
            raise LakeError(
                f"column {RAW_LABEL_COLUMN!r} is the name dpstream gives a clipped label's raw values; rename it"
            )

    def _check_scale(self) -> None:
        """Refuse a numeric column with no public scale (with ``require_bounds``), an empty or infinite
        ``scale_range``, and a categorical column without its public categories."""
        missing = self.unbounded_columns()
        if self.require_bounds and missing:
            template = " ".join(f"{column}=LOW,HIGH" for column in missing)
            raise LakeError(
                f"no public bounds for {', '.join(map(repr, missing))}: the algorithms assume every column on the public "
                f"scale, and one raw column (coordinates, dollars) gives a model worse than the mean. Pass --bounds "
                f"{template} with public ranges (documentation, domain knowledge; never measured on the data), "
                "--unscaled COLUMN for a column already on that scale (an indicator, a 0/1 class label), or "
                "leave out --public-bounds-only to estimate them privately from a sample of rows left out of the lake"
            )
        low, high = self.scale_range
        if not (np.isfinite(low) and np.isfinite(high) and low < high):
            raise LakeError(
                f"scale_range must be finite with low < high, e.g. (-1, 1), got {self.scale_range!r}"
            )
        for column, categories in self.categorical.items():
            if not categories:
                raise LakeError(f"categorical column {column!r} needs its public list of categories")

    def record(self) -> dict[str, Any]:
        """The public preprocessing, as written beside the lake (``CONVERT_RECORD``) and copied into each
        model.json trained on it: what is needed to prepare new rows and to read predictions in the
        label's units."""
        return {
            "format": "dpstream-convert/1",
            "columns": list(self.columns),
            "label": self.label,
            "missing": self.missing,
            "impute_values": dict(self.impute_values),
            "categorical": {c: list(v) for c, v in self.categorical.items()},
            "unknown_category": self.unknown_category,
            "bounds": {c: list(b) for c, b in self.bounds.items()},
            "scale_range": list(self.scale_range),
            "unscaled": list(self.unscaled),
            "features": self.output_columns(),
            "label_classes": list(self.label_classes),
            "passthrough": list(self.passthrough),
            "intercept": self.intercept,
            **({"user_column": self.user_column} if self.user_column is not None else {}),
            **({"on_read": True} if self.on_read else {}),
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> ConvertSpec:
        """The spec a ``record()`` (e.g. model.json's ``preprocessing``) describes: converting new rows
        with it prepares them exactly as the training lake was prepared."""
        if record.get("format") != "dpstream-convert/1":
            raise LakeError(
                f"not a dpstream convert record (format {record.get('format')!r}); expected dpstream-convert/1"
            )
        return cls(
            columns=tuple(record["columns"]),
            label=record["label"],
            missing=record["missing"],
            impute_values=dict(record["impute_values"]),
            categorical={column: tuple(values) for column, values in record["categorical"].items()},
            unknown_category=record["unknown_category"],
            bounds={column: (float(low), float(high)) for column, (low, high) in record["bounds"].items()},
            scale_range=tuple(record["scale_range"]),
            unscaled=tuple(record["unscaled"]),
            label_classes=tuple(record.get("label_classes", ())),  # absent in records of older versions
            passthrough=tuple(record.get("passthrough", ())),
            intercept=bool(record.get("intercept", False)),
            user_column=record.get("user_column"),
            on_read=bool(record.get("on_read", False)),
        )

    @property
    def keeps_raw_label(self) -> bool:
        """Whether rows prepared with this spec carry ``RAW_LABEL_COLUMN``: a numeric label with bounds,
        which clipping may change (a label kept as it is, or coded by its class, is its own raw value)."""
        return not self.label_classes and self.label in self.bounds

    def unbounded_columns(self) -> list[str]:
        """The numeric columns (features, then a numeric label) with no public bounds and not declared unscaled."""
        return [
            column
            for column in (*self.columns, *(() if self.label_classes else (self.label,)))
            if column not in self.bounds
            and column not in self.unscaled
            and column not in (self.private_bounds.columns if self.private_bounds else ())
        ]

    def row_norm_bound(self, features: Sequence[str]) -> float | None:
        """A public bound on ‖x‖ for rows of ``features`` as this conversion writes them, from the schema
        alone (never from rows): sqrt(Σ contributions), where a column mapped onto ``scale_range`` [a, b]
        contributes max(a², b²), an unscaled column 1 (the public scale [−1, 1] the algorithms assume, as
        in the sqrt(d) default), and each one-hot group 1 however many of its columns are selected (exactly
        one of them is 1 in every row: unknown categories are refused or dropped). For California's 8
        numeric columns and 5 one-hot columns that is 3 instead of sqrt(13). None when a feature is not a
        column this conversion wrote (the caller keeps its sqrt(d) default)."""
        low, high = self.scale_range
        numeric = {column: max(low * low, high * high) for column in self.columns if column in self.bounds}
        numeric.update({column: 1.0 for column in self.columns if column not in self.bounds})
        if self.intercept:
            numeric[INTERCEPT_COLUMN] = 1.0
        groups = {
            f"{column}={value}": column for column, values in self.categorical.items() for value in values
        }
        if not features or any(name not in numeric and name not in groups for name in features):
            return None
        squared = sum(numeric[name] for name in features if name in numeric)
        squared += len({groups[name] for name in features if name in groups})
        return math.sqrt(squared)

    def output_columns(self) -> list[str]:
        """The lake's feature columns, in order (the label and the carried columns are not features)."""
        onehot = [f"{column}={value}" for column, values in self.categorical.items() for value in values]
        return list(self.columns) + onehot + ([INTERCEPT_COLUMN] if self.intercept else [])

    def original_units(self, column: str, values: np.ndarray) -> np.ndarray:
        """A lake column in the CSV's units: a bounded column mapped back from ``scale_range`` (values the
        conversion clipped stay at their bound), a coded label as its class name, anything else as is."""
        if column == self.label and self.label_classes:
            return np.asarray(self.label_classes, dtype=object)[np.asarray(values, dtype=np.int64)]
        if column in self.bounds and column not in self.unscaled:
            (low, high), (target_low, target_high) = self.bounds[column], self.scale_range
            return low + (np.asarray(values, dtype=np.float64) - target_low) * (high - low) / (
                target_high - target_low
            )
        return values
