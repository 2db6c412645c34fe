"""A registry of declarations by name: what algorithms, noise processes and table formats share.

Each kind of declaration keeps one ``Registry``; a module declares its entry with ``register`` when it is
imported, and everything that names entries (configs, builders, error messages) reads ``names`` and
``get``, so adding an entry is one module plus one registration.
"""

from __future__ import annotations

from typing import Generic, TypeVar

__all__ = ["Registry"]

Entry = TypeVar("Entry")


class Registry(Generic[Entry]):
    """Entries by name, in the order they were declared. ``reserved`` names are accepted by the callers
    but are no entry ("auto", "parquet"); ``what`` names the setting in errors ("algorithm")."""

    def __init__(self, what: str, reserved: tuple[str, ...] = ()) -> None:
        self.what, self.reserved = what, reserved
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, entry: Entry) -> Entry:
        if name in self.reserved or name in self._entries:
            raise ValueError(f"a {self.what} named {name!r} is already declared")
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Withdraw a declaration (a test's toy one)."""
        self._entries.pop(name, None)

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def entries(self) -> tuple[Entry, ...]:
        return tuple(self._entries.values())

    def get(self, name: str) -> Entry:
        """The entry ``name``; ``ValueError`` naming every accepted value otherwise."""
        try:
            return self._entries[name]
        except KeyError:
            accepted = ", ".join(map(repr, (*self.reserved, *self._entries)))
            raise ValueError(f"{self.what} must be one of {accepted}, got {name!r}") from None
