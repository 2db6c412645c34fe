"""Which kind of source a lake is and which version of it to read: the part of a ``LakeSpec`` that the
sources (``dpstream.pipelines.sources.protocol``) resolve into one pinned version."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.sources.formats import format_names

__all__ = ["SourceSpec"]


@dataclass(frozen=True)
class SourceSpec:
    """Which kind of source ``LakeSpec.url`` is and which version of it to read
    (``dpstream.pipelines.sources.protocol``). ``format="auto"`` detects a Delta table (``_delta_log/``) or an
    Iceberg table (``metadata/*.metadata.json``) at the URL's root, else reads a Parquet folder.
    ``version`` is a Delta version or an Iceberg snapshot id, ``as_of`` an ISO-8601 time (the version
    current then); neither: the latest. ``table`` and ``catalog`` name an Iceberg table in a pyiceberg
    catalog (its properties, with ``name``); without them the newest metadata file under the URL is read."""

    format: str = "auto"
    version: int | None = None
    as_of: str | None = None
    table: str | None = None
    catalog: tuple[tuple[str, str], ...] = ()
    # The config key that gave ``version``: "version" (Delta's name) or "snapshot_id" (Iceberg's), refused
    # on the other format; "" (the API, `predict --version`): either.
    pinned_by: str = ""

    def __post_init__(self) -> None:
        if self.format not in format_names():
            raise LakeError(f"lake.format must be one of {', '.join(format_names())}, got {self.format!r}")
        if self.version is not None and self.as_of is not None:
            raise LakeError("lake.version and lake.as_of both pin a version: give one of them")
        if self.as_of is not None:
            try:
                datetime.fromisoformat(self.as_of)
            except (TypeError, ValueError):
                raise LakeError(
                    f"lake.as_of must be an ISO-8601 time such as 2026-11-01T12:00:00+00:00, got {self.as_of!r}"
                ) from None
        if (self.table is not None or self.catalog) and self.format not in ("auto", "iceberg"):
            raise LakeError(
                f"lake.table and lake.catalog name an Iceberg table, but lake.format is {self.format!r}; "
                "remove them or set lake.format = 'iceberg'"
            )
        if self.catalog and self.table is None:
            raise LakeError(
                "lake.catalog is given without lake.table: name the table, e.g. table = 'db.events'"
            )
        object.__setattr__(
            self, "catalog", tuple(sorted((str(k), str(v)) for k, v in dict(self.catalog).items()))
        )
