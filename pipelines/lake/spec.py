"""A lake's description: where it lives, which columns are features and label, whose rows they are, and
the public preprocessing applied as they are read.

A lake is a directory or prefix of Parquet files (or a Delta or Iceberg table) on a local path, ``file://``
or ``s3://`` (storage options and endpoint from the config or the environment, e.g. ``AWS_ENDPOINT_URL``).
Features are a list of numeric columns or one fixed-size-list column; the label is one numeric column.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.preprocessing.rows import convert_rows
from dpstream.pipelines.preprocessing.spec import ConvertSpec
from dpstream.pipelines.sources.spec import SourceSpec
from dpstream.storage import open_url

__all__ = ["LakeSpec"]


@dataclass(frozen=True)
class LakeSpec:
    url: str
    features: tuple[str, ...] | str  # column names, or one fixed-size-list column
    label: str
    storage_options: dict[str, Any] = field(default_factory=dict)
    # The user unit: the source's id column (hashed by the shuffle, never a feature), or a shuffled
    # lake's dense user codes (``dpstream.pipelines.shuffle.users.USER_CODE_COLUMN``). None: the row.
    user_column: str | None = None
    source: SourceSpec = field(default_factory=SourceSpec)  # its format and the version to read
    # Public preprocessing applied to each row as it is read (``ConvertSpec.on_read``): the source holds
    # its raw columns, and ``features``/``label`` name the columns the preprocessing presents.
    preprocess: ConvertSpec | None = None
    # How a text id in ``user_column`` names a person (``dpstream.person_ids``): case folded
    # (``privacy.user_id_case_fold``) or not; NFKC, stripped and without format characters either way.
    user_id_case_fold: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.features, (list, tuple)):
            if not self.features:
                raise LakeError(
                    "features is empty: name the numeric feature columns or one fixed-size-list column"
                )
            object.__setattr__(self, "features", tuple(self.features))
        elif not isinstance(self.features, str) or not self.features:
            raise LakeError(
                f"features must be a list of column names or one column name, got {self.features!r}"
            )
        if not isinstance(self.label, str) or not self.label:
            raise LakeError(f"label must be a column name, got {self.label!r}")
        if self.preprocess is not None and (
            not self.preprocess.on_read
            or self.features != tuple(self.preprocess.output_columns())
            or self.label != self.preprocess.label
        ):
            raise LakeError(
                "a lake read with preprocessing presents its columns: features = preprocess.output_columns(), "
                "label = preprocess.label, and the preprocessing applied on read (on_read=True)"
            )
        if self.user_column is not None:
            if not isinstance(self.user_column, str) or not self.user_column:
                raise LakeError(f"user_column must be a column name, got {self.user_column!r}")
            if self.user_column in self.columns:
                role = "the label" if self.user_column == self.label else "a feature"
                raise LakeError(
                    f"privacy.user_column {self.user_column!r} is {role}: a person's id is never trained on; "
                    "drop it from the features (or name another label)"
                )

    @property
    def columns(self) -> list[str]:
        names = [self.features] if isinstance(self.features, str) else list(self.features)
        return names + [self.label]

    @property
    def read_columns(self) -> list[str]:
        """The columns read from the source: ``columns`` (or, with ``preprocess``, the raw columns it
        converts) and the user column, if any."""
        users = [self.user_column] if self.user_column is not None else []
        if self.preprocess is None:
            return self.columns + users
        raw = self.preprocess
        return list(dict.fromkeys([*raw.columns, *raw.categorical, raw.label, *users]))

    def present(self, rows: pa.Table, path: str, offset: int = 0) -> pa.Table:
        """A source file's ``rows`` (starting at live row ``offset`` of ``path``) as the lake presents them:
        ``columns`` and the user column, the raw columns converted by ``preprocess`` when it is set. Every
        row is kept (``ConvertSpec.on_read``); a value it cannot convert raises ``LakeError`` naming it."""
        if self.preprocess is None:
            return rows
        converted = convert_rows(rows, self.preprocess, offset, path.rsplit("/", 1)[-1])
        if self.user_column is not None:
            converted = converted.append_column(self.user_column, rows.column(self.user_column))
        return converted

    def filesystem(self):
        return open_url(self.url, self.storage_options)
