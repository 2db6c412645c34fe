"""The data plane's one error type, apart so that every module (specs, sources, lakes) can raise it."""

from __future__ import annotations

__all__ = ["LakeError"]


class LakeError(ValueError):
    """A lake cannot be used as given. The message names the file, column and row, and the fix."""
