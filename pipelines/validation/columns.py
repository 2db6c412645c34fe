"""The columns a lake's files must have for a config: each used column once, of a type it can train on.

A file's footer answers this before any value is read (``validate.check_file``): a missing or repeated
column, a non-numeric feature or label, a feature column that is not a list of numbers, and, with
``[preprocess]``, a raw column converted as a number that is not one. Each refusal names the file, the
column and the fix.
"""

from __future__ import annotations

import pyarrow as pa

from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.lake.spec import LakeSpec
from dpstream.pipelines.preprocessing.spec import RAW_LABEL_COLUMN, ConvertSpec
from dpstream.pipelines.validation.values import file_name

__all__ = ["feature_width", "raw_width"]


def raw_width(schema: pa.Schema, preprocess: ConvertSpec, path: str) -> int:
    """The width of the rows ``preprocess`` presents, once the raw columns it converts as numbers are numbers
    (a categorical column, and a label coded by public classes, may hold anything)."""
    numeric = [*preprocess.columns, *(() if preprocess.label_classes else (preprocess.label,))]
    for column in numeric:
        kind = schema.field(column).type
        if not any(test(kind) for test in (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal)):
            fix = (
                "a regression's label is a number (a classifier's class names go in model.classes)"
                if column == preprocess.label
                else "list its public values in preprocess.categories (one-hot), or leave it out of lake.features"
            )
            raise LakeError(f"{file_name(path)}: column {column!r} has non-numeric type {kind}; {fix}")
    return len(preprocess.output_columns())


def feature_width(schema: pa.Schema, spec: LakeSpec, path: str) -> int:
    """The vector width ``spec`` reads from files of ``schema`` (-1: a list column, known once read), or
    ``LakeError`` naming the first column the file lacks, repeats or holds in a type it cannot train on."""
    for column in spec.read_columns if spec.preprocess is not None else spec.columns:
        copies = len(schema.get_all_field_indices(column))
        if copies > 1:
            raise LakeError(
                f"{file_name(path)}: column {column!r} appears {copies} times in the file's schema, so which one to read "
                "is ambiguous; rewrite the file with distinct column names"
            )
        if copies == 0:
            raise LakeError(
                f"{file_name(path)}: column {column!r} is missing (columns present: {', '.join(_listed(schema))}); "
                "fix the feature/label names in the config"
            )
    if spec.preprocess is not None:
        return raw_width(schema, spec.preprocess, path)
    label_type = schema.field(spec.label).type
    if not (pa.types.is_integer(label_type) or pa.types.is_floating(label_type)):
        raise LakeError(
            f"{file_name(path)}: label column {spec.label!r} has non-numeric type {label_type}; convert it to a number"
        )
    if isinstance(spec.features, str):
        feature_type = schema.field(spec.features).type
        if not pa.types.is_fixed_size_list(feature_type) and not pa.types.is_list(feature_type):
            raise LakeError(
                f"{file_name(path)}: feature column {spec.features!r} has type {feature_type}, not a list of numbers; "
                "use one fixed-size-list column or a list of numeric columns"
            )
        value_type = feature_type.value_type
        if not (pa.types.is_integer(value_type) or pa.types.is_floating(value_type)):
            raise LakeError(
                f"{file_name(path)}: feature column {spec.features!r} holds {value_type}, not numbers"
            )
        return feature_type.list_size if pa.types.is_fixed_size_list(feature_type) else -1
    for column in spec.features:
        column_type = schema.field(column).type
        if not (pa.types.is_integer(column_type) or pa.types.is_floating(column_type)):
            raise LakeError(
                f"{file_name(path)}: feature column {column!r} has non-numeric type {column_type}; drop it from the "
                "features or convert it (e.g. one-hot encode with `dpstream convert`)"
            )
    return len(spec.features)


def _listed(schema: pa.Schema) -> list[str]:
    """The columns a config may name: the raw label dpstream keeps for evaluation is not one of them."""
    return [name for name in schema.names if name != RAW_LABEL_COLUMN]
