"""The public preprocessing applied to one batch of rows (``convert_rows``): the columns a ``ConvertSpec``
selects, missing values imputed or their rows dropped, categories one-hot encoded, class labels coded by
their public position, bounded columns mapped onto ``scale_range`` (``range_map``), a constant intercept,
and, for `dpstream convert`, a clipped label's values as they were (``RAW_LABEL_COLUMN``: for the held-out
evaluation only).
Every error names the source, the row and the column, and the fix (a CSV's flag, or a config's key when
``spec.on_read``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.memory import pool_astype, pool_empty, sum_is_finite
from dpstream.pipelines.preprocessing.range_map import map_range
from dpstream.pipelines.preprocessing.spec import INTERCEPT_COLUMN, RAW_LABEL_COLUMN, ConvertSpec

__all__ = ["convert_rows", "require_columns", "prepared_feature_type"]

RowNamer = Callable[[int], str]


def convert_rows(
    batch: pa.RecordBatch | pa.Table,
    spec: ConvertSpec,
    offset: int,
    source: str,
    positions: np.ndarray | None = None,
    *,
    with_label: bool = True,
    raw_label: bool = False,
) -> pa.Table:
    """The batch's rows converted by ``spec``; ``positions`` are the CSV data rows of a filtered batch
    (errors name them), else the rows are ``offset``, ``offset + 1``, ... (with the row's line in the CSV
    file, unless ``spec.on_read``: rows of a Parquet file, whose errors name the config's keys).
    ``with_label=False``: rows to score, which have no label (neither read nor written). ``raw_label``: a
    clipped label's values as they were are written too (``RAW_LABEL_COLUMN``; `dpstream convert`)."""
    row_of = _row_namer(offset, positions, csv_lines=not spec.on_read)
    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    label = [spec.label] if with_label else []
    require_columns(
        source,
        [*spec.columns, *spec.categorical, *label, *spec.passthrough],
        table.column_names,
        not spec.on_read,
    )
    keep = np.ones(table.num_rows, dtype=bool)
    numeric: dict[str, np.ndarray] = {}
    # Features stored in float32 (or narrower) are prepared in float32: the mapped value is within one
    # float32 rounding of the exact one, as the stored value itself was, and the prepared lake (shuffle
    # pieces, parts, every decode of training) is half the bytes. Wider sources stay float64.
    feature_dtype = prepared_feature_type(
        [table.column(name).type for name in spec.columns]
    ).to_pandas_dtype()
    table = _categories_imputed(table, spec)
    if spec.on_read:
        _refuse_missing(
            table, spec, [*spec.categorical, *(label if spec.label_classes else [])], source, row_of
        )
    if spec.label_classes and with_label:
        numeric[spec.label] = _coded_label(table, spec, keep, source, row_of)
    for column in list(spec.columns) + ([] if spec.label_classes else label):
        # Each feature in its stored width at once: a whole file's float64 copies would otherwise be
        # held together (a 1,000,000-row file of 16 float32 features: 128 MB beside its 64).
        width = np.float64 if column == spec.label else feature_dtype
        values = _numeric_values(table.column(column), column, spec, keep, source, row_of)
        if column == spec.label and raw_label and spec.keeps_raw_label:
            # Before clipping: the held-out evaluation scores against it (``RAW_LABEL_COLUMN``).
            numeric[RAW_LABEL_COLUMN] = pool_astype(values, np.float64)
        numeric[column] = _scaled(values, column, spec, width)
    onehot = _onehot_columns(table, spec, keep, feature_dtype, source, row_of, scoring=not with_label)
    return _converted_table(table, spec, keep, numeric, onehot, feature_dtype, with_label)


def _row_namer(offset: int, positions: np.ndarray | None, csv_lines: bool) -> RowNamer:
    """How an error names a batch's row: 0-based among the data rows (and its line in a CSV file)."""

    def row_of(row: int) -> str:
        data_row = int(positions[row]) if positions is not None else offset + row
        return f"{data_row} (line {data_row + 2} of the file)" if csv_lines else str(data_row)

    return row_of


def _coded_label(
    table: pa.Table, spec: ConvertSpec, keep: np.ndarray, source: str, row_of: RowNamer
) -> np.ndarray:
    """Each label's position in ``spec.label_classes``; a row whose label is not a class is dropped (in place
    in ``keep``) or refused (``_drop_or_refuse``)."""
    positions, known = _class_positions(table.column(spec.label), spec.label_classes, codes=spec.on_read)
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
    return positions


def _numeric_values(
    values: pa.ChunkedArray,
    column: str,
    spec: ConvertSpec,
    keep: np.ndarray,
    source: str,
    row_of: RowNamer,
) -> np.ndarray:
    """A numeric column (a feature, or a numeric label) as stored, missing values imputed or their rows
    dropped (in place in ``keep``)."""
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
        array = _without_missing(array, column, spec, keep, source, row_of)
    return array


def _scaled(array: np.ndarray, column: str, spec: ConvertSpec, width: Any) -> np.ndarray:
    """``array`` in ``width``, mapped from its public range onto ``spec.scale_range`` where the column
    has one (``map_range``)."""
    if column in spec.bounds:
        array = map_range(array, spec.bounds[column], spec.scale_range, width)
    return pool_astype(array, width)


def _without_missing(
    array: np.ndarray, column: str, spec: ConvertSpec, keep: np.ndarray, source: str, row_of: RowNamer
) -> np.ndarray:
    """``array`` (a column holding a NaN or an infinity) with its missing values imputed, or their rows
    dropped from ``keep``; refused where neither applies (an infinity read with [preprocess], a missing
    label read with [preprocess], a missing value with no imputation constant)."""
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
    return array


def _onehot_columns(
    table: pa.Table,
    spec: ConvertSpec,
    keep: np.ndarray,
    feature_dtype: Any,
    source: str,
    row_of: RowNamer,
    scoring: bool,
) -> dict[str, np.ndarray]:
    """``{"column=value": indicator}`` for each categorical column and each of its public categories; a row
    whose category is not in the list is dropped (in place in ``keep``) or refused."""
    onehot: dict[str, np.ndarray] = {}
    for column, categories in spec.categorical.items():
        values = table.column(column)
        codes = _category_positions(values, categories)
        known = codes >= 0
        _drop_or_refuse(
            known,
            keep,
            spec,
            lambda row, column=column, values=values, categories=categories: _unknown_category(
                source, row_of(row), column, values[row].as_py(), categories, spec.on_read, scoring
            ),
        )
        for index, value in enumerate(categories):
            onehot[f"{column}={value}"] = (codes == index).astype(feature_dtype)
    return onehot


def _unknown_category(
    source: str, row: str, column: str, value: Any, categories: tuple[Any, ...], on_read: bool, scoring: bool
) -> str:
    """The refusal of a category outside its public list, with the fix that applies where it was met."""
    return (
        f"{source}: row {row} of "
        f"column {column!r} has category {value!r} not in the public list {list(categories)}"
        + (
            " (the column holds numbers and the list text: write the values without quotes)"
            if not isinstance(value, str) and all(isinstance(category, str) for category in categories)
            else ""
        )
        + (
            # Scoring: the list is the trained model's, so adding to it means training again.
            "; the model knows only these categories: score rows whose value is among them, or "
            f"train again with it added to preprocess.categories.{column}"
            if scoring and on_read
            else "; add it "
            + (
                f"to preprocess.categories.{column}"
                if on_read
                else "to the list or pass --unknown-category drop"
            )
        )
    )


def _converted_table(
    table: pa.Table,
    spec: ConvertSpec,
    keep: np.ndarray,
    numeric: dict[str, np.ndarray],
    onehot: dict[str, np.ndarray],
    feature_dtype: Any,
    with_label: bool,
) -> pa.Table:
    """The kept rows as the lake holds them: the numeric features, the one-hot columns, the intercept, the
    label (a class label as int64 positions) and a clipped label's raw values (``RAW_LABEL_COLUMN``), then
    the carried columns untouched."""
    every_row = bool(keep.all())
    columns = {name: numeric[name] if every_row else numeric[name][keep] for name in spec.columns}
    columns.update({name: array if every_row else array[keep] for name, array in onehot.items()})
    if spec.intercept:
        intercept = pool_empty(int(keep.sum()), feature_dtype)
        intercept.fill(1)
        columns[INTERCEPT_COLUMN] = intercept
    if with_label:
        for name in (spec.label, RAW_LABEL_COLUMN) if RAW_LABEL_COLUMN in numeric else (spec.label,):
            columns[name] = numeric[name] if every_row else numeric[name][keep]
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


def _drop_or_refuse(
    known: np.ndarray, keep: np.ndarray, spec: ConvertSpec, message: Callable[[int], str]
) -> None:
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


def _categories_imputed(table: pa.Table, spec: ConvertSpec) -> pa.Table:
    """``table`` with the nulls of each category column that has a public constant filled with it."""
    for column in spec.categorical:
        constant = spec.impute_values.get(column)
        values = table.column(column)
        if constant is None or values.null_count == 0:
            continue
        kind = values.type.value_type if pa.types.is_dictionary(values.type) else values.type
        if pa.types.is_dictionary(values.type):
            values = pc.cast(values, kind)
        filled = pc.fill_null(values, pa.scalar(constant).cast(kind))
        table = table.set_column(table.schema.get_field_index(column), column, filled)
    return table


def _refuse_missing(
    table: pa.Table, spec: ConvertSpec, columns: list[str], source: str, row_of: RowNamer
) -> None:
    """A null in a column coded by a public list (a category, a class label) with no constant to impute it
    with: refused, naming its row and the fix."""
    for column in columns:
        nulls = table.column(column).is_null().to_numpy(zero_copy_only=False)
        if nulls.any():
            fix = (
                f"give preprocess.impute.{column} a public constant (one of its categories), or fill it in in the table"
                if column in spec.categorical
                else "fill it in in the table (a label is never imputed)"
            )
            raise LakeError(
                f"{source}: row {row_of(int(np.argmax(nulls)))} of column {column!r} is missing (null); {fix}"
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
