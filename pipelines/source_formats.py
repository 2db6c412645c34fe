"""The table formats a lake may be, each declared once: how its root is recognised and how it is opened.

A format is one module (its ``Source``: the files of one pinned version, and a reader that honours that
version's deletes) plus one ``register(SourceFormat(...))`` at the end of that module; the package
imports each (``dpstream/pipelines/__init__.py``). A plain Parquet folder is the fallback and needs no
declaration. ``lake.format`` accepts ``"auto"``, ``"parquet"`` or a declared name; ``"auto"`` asks each
declared format, in declaration order, whether the URL's root holds one of its tables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
    name: str
    detect: Callable[[Any, str], bool]  # (filesystem, root) -> the root holds a table of this format
    open: Callable[[Any], Any]  # a LakeSpec -> its Source (``dpstream.pipelines.sources.Source``)


_FORMATS: dict[str, SourceFormat] = {}


def register(declaration: SourceFormat) -> SourceFormat:
    if declaration.name in (AUTO, PARQUET) or declaration.name in _FORMATS:
        raise ValueError(f"a source format named {declaration.name!r} is already declared")
    _FORMATS[declaration.name] = declaration
    return declaration


def unregister(name: str) -> None:
    """Withdraw a declaration (a test's toy format)."""
    _FORMATS.pop(name, None)


def format_names() -> tuple[str, ...]:
    """Every value ``lake.format`` accepts: ``"auto"``, ``"parquet"`` and the declared formats."""
    return (AUTO, PARQUET, *_FORMATS)


def declared_formats() -> tuple[SourceFormat, ...]:
    return tuple(_FORMATS.values())


def source_format(name: str) -> SourceFormat:
    try:
        return _FORMATS[name]
    except KeyError:
        raise ValueError(f"lake.format must be one of {', '.join(format_names())}, got {name!r}") from None
