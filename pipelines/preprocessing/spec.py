"""The public preprocessing of a table's rows: columns selected, missing values imputed or dropped,
categories one-hot encoded, numeric columns clipped to public bounds and mapped onto ``scale_range``,
a class label coded by its position in a public list, a constant intercept column.

``ConvertSpec`` describes it and ``convert_rows`` applies it to one batch. Two callers: ``dpstream convert``
writes a CSV's rows converted into a new Parquet lake (``dpstream.pipelines.preprocessing.convert``), and a lake read
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
import pyarrow as pa
import pyarrow.compute as pc

from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.memory import pool_astype, pool_empty, sum_is_finite
from dpstream.pipelines.preprocessing.range_map import map_range

if TYPE_CHECKING:
    from dpstream.pipelines.preprocessing.bounds import PrivateBoundsRequest

__all__ = ["ConvertSpec", "convert_rows", "require_columns", "prepared_feature_type", "INTERCEPT_COLUMN"]

INTERCEPT_COLUMN = "intercept"


@dataclass(frozen=True)
class ConvertSpec:
    columns: tuple[str, ...]  # numeric feature columns to keep, in order
    label: str
    missing: str = "drop"  # "drop" rows with a missing value, or "impute" the public constants below
    impute_values: dict[str, float] = field(default_factory=dict)
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
    # (dpstream.pipelines.preprocessing.bounds); the record then holds the released bounds and their guarantee.
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
        if self.unknown_category not in ("error", "drop"):
            raise LakeError(f"unknown_category must be 'error' or 'drop', got {self.unknown_category!r}")
        if not self.columns and not self.categorical:
            raise LakeError("select at least one feature column (columns) or categorical column")
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


def convert_rows(
    batch: pa.RecordBatch | pa.Table,
    spec: ConvertSpec,
    offset: int,
    source: str,
    positions: np.ndarray | None = None,
    *,
    with_label: bool = True,
) -> pa.Table:
    """The batch's rows converted by ``spec``; ``positions`` are the CSV data rows of a filtered batch
    (errors name them), else the rows are ``offset``, ``offset + 1``, ... (with the row's line in the CSV
    file, unless ``spec.on_read``: rows of a Parquet file, whose errors name the config's keys).
    ``with_label=False``: rows to score, which have no label (neither read nor written)."""
    csv_lines = not spec.on_read

    def row_of(row: int) -> str:
        """A data row as a user finds it: 0-based among the data rows (and its line in a CSV file)."""
        data_row = int(positions[row]) if positions is not None else offset + row
        return f"{data_row} (line {data_row + 2} of the file)" if csv_lines else str(data_row)

    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    label = [spec.label] if with_label else []
    require_columns(
        source, [*spec.columns, *spec.categorical, *label, *spec.passthrough], table.column_names, csv_lines
    )
    keep = np.ones(table.num_rows, dtype=bool)
    numeric: dict[str, np.ndarray] = {}
    # Features stored in float32 (or narrower) are prepared in float32: the mapped value is within one
    # float32 rounding of the exact one, as the stored value itself was, and the prepared lake (shuffle
    # pieces, parts, every decode of training) is half the bytes. Wider sources stay float64.
    feature_dtype = prepared_feature_type(
        [table.column(name).type for name in spec.columns]
    ).to_pandas_dtype()
    if spec.on_read:
        _refuse_missing(table, [*spec.categorical, *(label if spec.label_classes else [])], source, row_of)
    if spec.label_classes and with_label:
        numeric[spec.label], known = _class_positions(
            table.column(spec.label), spec.label_classes, codes=spec.on_read
        )
        _drop_or_refuse(
            known,
            keep,
            spec,
            lambda row: (
                f"{source}: row {row_of(row)} of the label {spec.label!r} is "
                f"{table.column(spec.label)[row].as_py()!r}, not one of the public classes "
                f"{list(spec.label_classes)}; "
                + (
                    "add it to model.classes"
                    if spec.on_read
                    else "add it to --label-classes or pass --unknown-category drop"
                )
            ),
        )
    for column in list(spec.columns) + ([] if spec.label_classes else label):
        values = table.column(column)
        if not (
            pa.types.is_integer(values.type)
            or pa.types.is_floating(values.type)
            or pa.types.is_decimal(values.type)
            or pa.types.is_null(values.type)
        ):
            raise LakeError(
                f"{source}: column {column!r} is not numeric (type {values.type}, e.g. {values[0].as_py()!r}); "
                "drop it from the selection or encode it as categorical"
            )
        if pa.types.is_float32(values.type) or pa.types.is_float64(values.type):
            # As stored (nulls as NaN): the range map widens each value itself, and a float64 copy of the
            # column first was a pass of its own over every batch validation, the shuffle and scoring read.
            array = values.to_numpy(zero_copy_only=False)
        else:
            array = pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False)
        if not sum_is_finite(array):
            infinite = np.isinf(array)
            if spec.on_read and infinite.any():
                row = int(np.argmax(infinite))
                raise LakeError(
                    f"{source}: row {row_of(row)} of column {column!r} is {array[row]}: no range makes it a value; fix or "
                    "delete the row through the table"
                )
            nulls = np.isnan(array)
            if nulls.any():
                if column == spec.label and spec.on_read:
                    raise LakeError(
                        f"{source}: row {row_of(int(np.argmax(nulls)))} of the label {column!r} is missing: a row "
                        "without a label cannot be trained on; delete it through the table (or fill in its label)"
                    )
                if spec.missing == "drop" or column == spec.label:
                    keep &= ~nulls
                elif column in spec.impute_values:
                    # A NumPy float64, not a Python float: beside a float32 column a Python float is a
                    # weak scalar, rounded to float32 before the map (0.1 would become 0.10000000149).
                    array = np.where(nulls, np.float64(spec.impute_values[column]), array)
                else:
                    raise LakeError(
                        f"{source}: column {column!r} has a missing value at row {row_of(int(np.argmax(nulls)))} and "
                        + (
                            f"no imputation constant; give a public one in preprocess.impute ({column} = VALUE)"
                            if spec.on_read
                            else "no imputation constant; pass --impute COLUMN=VALUE (a public value) or --missing drop"
                        )
                    )
        # Each feature in its stored width at once: a whole file's float64 copies would otherwise be
        # held together (a 1,000,000-row file of 16 float32 features: 128 MB beside its 64).
        width = np.float64 if column == spec.label else feature_dtype
        if column in spec.bounds:
            array = map_range(array, spec.bounds[column], spec.scale_range, width)
        numeric[column] = pool_astype(array, width)
    onehot: dict[str, np.ndarray] = {}
    for column, categories in spec.categorical.items():
        values = table.column(column)
        codes = _category_positions(values, categories)
        known = codes >= 0
        _drop_or_refuse(
            known,
            keep,
            spec,
            lambda row, column=column, values=values, categories=categories: (
                f"{source}: row {row_of(row)} of "
                f"column {column!r} has category {values[row].as_py()!r} not in the public list {list(categories)}"
                + (
                    " (the column holds numbers and the list text: write the values without quotes)"
                    if not isinstance(values[row].as_py(), str)
                    and all(isinstance(value, str) for value in categories)
                    else ""
                )
                + (
                    # Scoring: the list is the trained model's, so adding to it means training again.
                    "; the model knows only these categories: score rows whose value is among them, or "
                    f"train again with it added to preprocess.categories.{column}"
                    if not with_label and spec.on_read
                    else "; add it "
                    + (
                        f"to preprocess.categories.{column}"
                        if spec.on_read
                        else "to the list or pass --unknown-category drop"
                    )
                )
            ),
        )
        for index, value in enumerate(categories):
            onehot[f"{column}={value}"] = (codes == index).astype(feature_dtype)
    every_row = bool(keep.all())
    columns = {name: numeric[name] if every_row else numeric[name][keep] for name in spec.columns}
    columns.update({name: array if every_row else array[keep] for name, array in onehot.items()})
    if spec.intercept:
        intercept = pool_empty(int(keep.sum()), feature_dtype)
        intercept.fill(1)
        columns[INTERCEPT_COLUMN] = intercept
    if with_label:
        columns[spec.label] = numeric[spec.label] if every_row else numeric[spec.label][keep]
    table_out = pa.table(columns)
    if spec.label_classes and with_label:
        table_out = table_out.set_column(
            table_out.schema.get_field_index(spec.label),
            spec.label,
            pa.array(columns[spec.label], pa.int64()),
        )
    for column in spec.passthrough:
        table_out = table_out.append_column(column, table.column(column).filter(pa.array(keep)))
    return table_out


def prepared_feature_type(column_types: list[pa.DataType]) -> pa.DataType:
    """The type ``convert_rows`` gives the features prepared from raw numeric columns of these types:
    float32 when every one fits (``_fits_float32``), else float64."""
    return pa.float32() if all(_fits_float32(column_type) for column_type in column_types) else pa.float64()


def _fits_float32(column_type: pa.DataType) -> bool:
    """Whether every value of a column of this type is a float32 (floats of at most 32 bits, integers of
    at most 16)."""
    if pa.types.is_floating(column_type):
        return column_type.bit_width <= 32
    return pa.types.is_integer(column_type) and column_type.bit_width <= 16


def _drop_or_refuse(known: np.ndarray, keep: np.ndarray, spec: ConvertSpec, message: Any) -> None:
    """A value outside its public list: its row dropped (``unknown_category="drop"``, in place in ``keep``)
    or a ``LakeError`` with ``message(row)`` for the first one."""
    if known.all():
        return
    if spec.unknown_category != "drop":
        raise LakeError(message(int(np.argmax(~known))))
    keep &= known


def _category_positions(values: pa.ChunkedArray | pa.Array, categories: tuple[Any, ...]) -> np.ndarray:
    """Each value's position in ``categories``, −1 where it is in none (or null). A text column against a list
    of text, or an integer column against integers, is matched in Arrow (``index_in``): the shuffle's hot
    path, with no Python object per value; anything else value by value as Python compares them."""
    kind = values.type.value_type if pa.types.is_dictionary(values.type) else values.type
    text = pa.types.is_string(kind) or pa.types.is_large_string(kind)
    if (text and all(isinstance(value, str) for value in categories)) or (
        pa.types.is_integer(kind) and all(type(value) is int for value in categories)
    ):
        value_set = pa.array(list(categories), type=pa.string() if text else pa.int64())
        if not text:
            values = pc.cast(values, pa.int64())
        elif pa.types.is_dictionary(values.type):
            values = pc.cast(values, pa.string())
        found = pc.index_in(values, value_set=value_set)
        return pc.fill_null(found, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    python = np.asarray(values.to_pylist(), dtype=object)
    positions = np.full(len(python), -1, dtype=np.int64)
    for index, value in enumerate(categories):
        positions[(positions < 0) & (python == value)] = index
    return positions


def _refuse_missing(table: pa.Table, columns: list[str], source: str, row_of: Any) -> None:
    """A null in a column coded by a public list (a category, a class label) has no code and no constant to
    impute it with: refused, naming its row."""
    for column in columns:
        nulls = table.column(column).is_null().to_numpy(zero_copy_only=False)
        if nulls.any():
            raise LakeError(
                f"{source}: row {row_of(int(np.argmax(nulls)))} of column {column!r} is missing (null); fill it in or "
                "delete the row through the table"
            )


def _class_positions(
    values: pa.ChunkedArray | pa.Array, classes: tuple[str, ...], codes: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(each label's position in ``classes``, −1 where unknown or missing; which are known). Labels are
    compared as text, so a CSV column of 0/1 numbers and the class list "0,1" agree; with ``codes`` (a
    table read with [preprocess]) an integer column already holds the positions 0..K−1 of ``classes``."""
    if codes and pa.types.is_integer(values.type):
        positions = pc.fill_null(values, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        known = (positions >= 0) & (positions < len(classes))
        return np.where(known, positions, -1), known
    text = pc.cast(values, pa.string()) if not pa.types.is_string(values.type) else values
    positions = pc.index_in(text, value_set=pa.array(list(classes), pa.string())).to_numpy(
        zero_copy_only=False
    )
    positions = np.where(np.isnan(positions.astype(np.float64)), -1, positions).astype(np.int64)
    return positions, positions >= 0


def require_columns(source: str, needed: list[str], present: list[str], csv: bool = True) -> None:
    missing = [column for column in needed if column not in present]
    if missing:
        where = "the CSV" if csv else "the file"
        raise LakeError(
            f"{source}: column {missing[0]!r} is not in {where} (columns: {', '.join(present)}); fix the column selection"
        )
