"""The table formats a lake may be, each declared once: how its root is recognised and how it is opened.

A format is one module (its ``Source``: the files of one pinned version, and a reader that honours that
version's deletes) plus one ``register(SourceFormat(...))`` at the end of that module; the package
imports each (``pipelines/__init__.py``). A plain Parquet folder is the fallback and needs no
declaration. ``lake.format`` accepts ``"auto"``, ``"parquet"`` or a declared name; ``"auto"`` asks each
declared format, in declaration order, whether the URL's root holds one of its tables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatch
from typing import Any

from dpstream.registry import Registry

__all__ = [
    "SourceFormat",
    "register",
    "unregister",
    "source_format",
    "format_names",
    "declared_formats",
    "AUTO",
    "PARQUET",
]

AUTO, PARQUET = "auto", "parquet"


@dataclass(frozen=True)
class SourceFormat:
    """A table format. ``marker`` is the folder at a table's root that holds its log or metadata, and
    ``marker_files`` the pattern its files match there (``fnmatch``): a file found in such a folder while
    listing a plain Parquet folder means the listing went inside a table, which is refused
    (``dpstream.pipelines.lake.files.list_lake``: the folder keeps files the table removed)."""

    name: str
    detect: Callable[[Any, str], bool]  # (filesystem, root) -> the root holds a table of this format
    open: Callable[[Any], Any]  # a LakeSpec -> its Source (``dpstream.pipelines.sources.protocol.Source``)
    described: str  # what the table is, for messages: "a Delta Lake table (_delta_log/)"
    marker: str
    marker_files: str = "*"

    def table_root(self, relative_parts: list[str]) -> str | None:
        """The table root (relative, "." for the listed folder itself) if the file at these path parts
        sits in this format's marker folder, else None."""
        if len(relative_parts) >= 2 and relative_parts[-2] == self.marker:
            if fnmatch(relative_parts[-1], self.marker_files):
                return "/".join(relative_parts[:-2]) or "."
        return None


# The error names the config key; "auto" and "parquet" are accepted without a declaration.
_FORMATS: Registry[SourceFormat] = Registry("lake.format", reserved=(AUTO, PARQUET))


def register(declaration: SourceFormat) -> SourceFormat:
    return _FORMATS.register(declaration.name, declaration)


unregister = _FORMATS.unregister
declared_formats = _FORMATS.entries
source_format = _FORMATS.get


def format_names() -> tuple[str, ...]:
    """Every value ``lake.format`` accepts: ``"auto"``, ``"parquet"`` and the declared formats."""
    return (AUTO, PARQUET, *_FORMATS.names())
